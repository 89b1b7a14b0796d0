#!/usr/bin/env bash
# Print the path of a Python 3.12 interpreter: $PYTHON312, python3.12 on PATH, or one installed through pyenv.
set -u
ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' >/dev/null 2>&1; }
if [ -n "${PYTHON312:-}" ] && ok "$PYTHON312"; then echo "$PYTHON312"; exit 0; fi
for c in python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if ok "$p"; then echo "$p"; exit 0; fi
done
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for p in $(ls -d "$root"/versions/3.12.*/bin/python3 2>/dev/null | sort -V -r); do
    if ok "$p"; then echo "$p"; exit 0; fi
  done
fi
for p in $(ls -d "$HOME"/.pyenv/versions/3.12.*/bin/python3 2>/dev/null | sort -V -r); do
  if ok "$p"; then echo "$p"; exit 0; fi
done
echo "error: no Python 3.12 found. LeRobot 0.6.1 needs Python >= 3.12: install it (e.g. 'pyenv install 3.12')" \
     "or point PYTHON312=/path/to/python3.12 at one, then run 'make setup' again." >&2
exit 1
