"""ansible-test's pip bootstrap, from the standard library and PyPI (make sanity-venvs).

ansible-test (ansible_test/_util/target/setup/requirements.py, bootstrap) bootstraps pip into each
sanity-test virtualenv it creates (made with --without-pip) by running get-pip-<version>.py, which
it downloads from ci-files.testing.ansible.com and caches at
~/.ansible/test/cache/get_pip_<version>.py. That host is not reachable from every CI machine (it
is not from ours); PyPI is. This script is put at that cache path and does what get-pip.py does
with the same arguments: put pip into the running interpreter's environment (ensurepip, bundled
with Python), then `pip install` the requested packages (ansible-test passes pip==<version> and
its pins) from the configured index. get-pip's own --no-setuptools/--no-wheel only say "do not
add these", which plain `pip install` never does, so they are dropped.
"""

import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main(argv):
    subprocess.run(
        [sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL
    )
    args = [arg for arg in argv if arg not in GET_PIP_ONLY]
    return subprocess.run([sys.executable, "-m", "pip", "install", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
