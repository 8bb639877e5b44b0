// SPDX-License-Identifier: MIT
// THE WATCHER: a thread of ours that finds out in the background which fences have passed, so
// that the program's threads need not ask the driver (fence_watcher.c says why and how).
#ifndef CCI_PRELOAD_FENCE_WATCHER_H
#define CCI_PRELOAD_FENCE_WATCHER_H

/// The two below are what the fences call, registered with them (cci_cuda_fence_watched_by, from
/// backend_cuda.c): the fences never name the watcher.
/// A fence was recorded and looks at the streams are dear (many live streams): the first call
/// starts the watcher (unless CCI_FENCE_WATCHER=0), later ones wake it if it sleeps. Cheap: one
/// relaxed load while it is busy.
void cci_fence_watcher_news(void);

/// 1 while the watcher runs: a fence it has not reached yet is left to it by a poll in passing.
int cci_fence_watcher_running(void);

/// Stops the watcher and waits for it (bounded): at exit, before CUDA is torn down.
void cci_fence_watcher_stop(void);

/// In a fork child: the watcher did not survive the fork; its state is forgotten.
void cci_fence_watcher_atfork_child(void);

#endif
