// SPDX-License-Identifier: MIT
// The lazy start: the one call in the preload that runs upward.
//
// Nothing starts at load time (lifecycle.c says why): the first CUDA call through any hook starts
// the layer, and that hook may sit in any room. So every room that asks whether the layer is
// active (serve/state.h, cci_state_active) calls this function, declared here at the bottom of
// the house and defined at its top, in lifecycle.c, which alone knows every room's start-up step.
// It runs once (pthread_once); later calls return at once.
#ifndef CCI_PRELOAD_START_H
#define CCI_PRELOAD_START_H

/// Runs the one-time start-up of the layer (lifecycle.c): reads the settings, decides the mode
/// and publishes it. Safe from any thread and any hook.
void cci_preload_start(void);

#endif
