# SPDX-License-Identifier: MIT
"""The console commands pip puts on the environment's bin/: `ccinterpose` and `ccreplay`.

pip decides where bin/ and site-packages are (a venv, --user, /usr/local), so the real launcher
and ccreplay live inside the package, next to the library, and these entry points exec them:
the launcher then finds the library beside itself (scripts/ccinterpose.in, the python-package
copy), and the program keeps this process's pid, signals and exit status.
"""
import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bin')


def _exec(name):
    path = os.path.join(_BIN, name)
    try:
        os.execv(path, [path] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write(f'{name}: cannot run {path}: {e.strerror} (reinstall the ccinterpose package)\n')
        return 1


def launcher():
    return _exec('ccinterpose')


def ccreplay():
    return _exec('ccreplay')
