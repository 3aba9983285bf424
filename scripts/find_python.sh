#!/usr/bin/env bash
# Print the path of a real CPython X.Y binary (never a pyenv shim, which resolves by the folder's
# .python-version and can silently give another version): a pyenv-installed one, else one on PATH.
#   scripts/find_python.sh 3.10
set -euo pipefail
want=${1:?usage: find_python.sh X.Y}
for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python"$want" \
            /usr/bin/python"$want" /usr/local/bin/python"$want"; do
  if [[ -x $cand ]] && [[ $("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])') == "$want" ]]; then
    echo "$cand"
    exit 0
  fi
done
echo "no CPython $want found (pyenv install $want, or apt install python$want)" >&2
exit 1
