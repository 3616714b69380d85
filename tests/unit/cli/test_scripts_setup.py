"""scripts/setup stops on a failed step with that step's own error and records nothing as done.

Each test runs a copy of the script in a temporary project whose PATH holds only fake
`python3`, `apt-get` and `sudo` beside the few real utilities the script uses: no network, no
real pip, nothing installed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[3] / "scripts" / "setup"
UTILITIES = ("bash", "dirname", "touch", "grep", "mktemp", "cat", "rm", "mkdir", "id", "tr", "cp",
             "cc")

# The fake interpreter answers the script's probes from environment variables:
# FAKE_VERSION ("3 11"), FAKE_NO_ENSUREPIP=1, FAKE_INCLUDE (where Python.h is),
# FAKE_PIP_FAILS=1 (for `pip install -e ...`, which otherwise "builds" the C module in place).
FAKE_PYTHON = """#!/bin/bash
case "$1" in
  -c)
    case "$2" in
      *version_info*) echo "$FAKE_VERSION" ;;
      *ensurepip*) [ -z "${FAKE_NO_ENSUREPIP:-}" ] || exit 1 ;;
      *sysconfig*) echo "$FAKE_INCLUDE" ;;
    esac ;;
  -m)
    case "$2" in
      venv) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
      pip)
        case " $* " in
          *" -e "*)
            if [ -n "${FAKE_PIP_FAILS:-}" ]; then
              echo "ERROR: Could not find a version that satisfies the requirement kio" >&2
              exit 1
            fi
            touch src/pykraft/records/_scan.cpython-311-x86_64-linux-gnu.so
            touch src/pykraft/metadata/_read.cpython-311-x86_64-linux-gnu.so
            echo "Successfully installed pykraft" ;;
        esac ;;
    esac ;;
esac
"""
FAKE_APT_GET = """#!/bin/bash
[ "$1" = update ] && exit 0
echo "E: Unable to locate package $4" >&2
exit 100
"""
FAKE_SUDO = '#!/bin/bash\nexec "$@"\n'


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(SETUP, tmp_path / "scripts" / "setup")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'pykraft'\n")
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "src" / "pykraft" / "records").mkdir(parents=True)
    (tmp_path / "src" / "pykraft" / "records" / "_scan.c").write_text("")
    (tmp_path / "src" / "pykraft" / "metadata").mkdir(parents=True)
    (tmp_path / "src" / "pykraft" / "metadata" / "_read.c").write_text("")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "Python.h").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in UTILITIES:
        real = shutil.which(name)
        assert real is not None, name
        (bin_dir / name).symlink_to(real)
    _executable(bin_dir / "python3", FAKE_PYTHON)
    _executable(bin_dir / "apt-get", FAKE_APT_GET)
    _executable(bin_dir / "sudo", FAKE_SUDO)
    return tmp_path


def run_setup(project: Path, *args: str, **fake: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(project / "bin"), "HOME": str(project), "FAKE_VERSION": "3 11",
           "FAKE_INCLUDE": str(project / "include"), **fake}
    return subprocess.run(
        [str(project / "bin" / "bash"), str(project / "scripts" / "setup"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_a_failed_pip_install_stops_with_pips_error_and_is_retried(project: Path) -> None:
    """pip's error is shown, the exit code is non-zero and no marker says it was installed;
    the next run (pip now working) installs and records it."""
    failed = run_setup(project, FAKE_PIP_FAILS="1")
    assert failed.returncode != 0
    assert "Could not find a version that satisfies the requirement kio" in failed.stderr
    assert not (project / ".venv" / ".pykraft-installed").exists()

    retried = run_setup(project)
    assert retried.returncode == 0, retried.stderr
    assert "Successfully installed pykraft" in retried.stdout
    assert (project / ".venv" / ".pykraft-installed").exists()


def test_a_failed_test_extras_install_records_neither_marker(project: Path) -> None:
    failed = run_setup(project, "--test", FAKE_PIP_FAILS="1")
    assert failed.returncode != 0
    assert "Could not find a version" in failed.stderr
    assert not list((project / ".venv").glob(".pykraft-installed*"))


def test_a_too_old_python_is_named_with_the_version_needed(project: Path) -> None:
    result = run_setup(project, FAKE_VERSION="3 9")
    assert result.returncode != 0
    assert "pykraft needs Python 3.11 or later; 'python3' is Python 3.9" in result.stderr
    assert "PYKRAFT_PYTHON" in result.stderr
    assert not (project / ".venv").exists()


def test_a_missing_python_is_reported(project: Path) -> None:
    (project / "bin" / "python3").unlink()
    result = run_setup(project)
    assert result.returncode != 0
    assert "pykraft needs Python 3.11 or later; 'python3' was not found" in result.stderr


def test_pykraft_python_chooses_the_interpreter(project: Path) -> None:
    (project / "bin" / "python3").rename(project / "bin" / "python3.12")
    result = run_setup(project, PYKRAFT_PYTHON="python3.12", FAKE_VERSION="3 12")
    assert result.returncode == 0, result.stderr
    assert (project / ".venv" / ".pykraft-installed").exists()


def test_missing_ensurepip_names_the_debian_package(project: Path) -> None:
    result = run_setup(project, FAKE_NO_ENSUREPIP="1", FAKE_VERSION="3 12")
    assert result.returncode != 0
    assert "install the OS package python3.12-venv" in result.stderr
    assert not (project / ".venv").exists()


def test_a_failed_kcat_install_stops_test_setup(project: Path) -> None:
    """CI needs kcat: an apt failure is an error with apt's message, not a warning."""
    result = run_setup(project, "--test")
    assert result.returncode != 0
    assert "E: Unable to locate package kcat" in result.stderr
    assert "could not install kcat" in result.stderr


def test_a_failed_openssl_install_stops_test_setup(project: Path) -> None:
    _executable(project / "bin" / "kcat", "#!/bin/bash\n")
    result = run_setup(project, "--test")
    assert result.returncode != 0
    assert "E: Unable to locate package openssl" in result.stderr
    assert "could not install openssl" in result.stderr


def test_a_failed_java_install_stops_test_setup(project: Path) -> None:
    _executable(project / "bin" / "kcat", "#!/bin/bash\n")
    _executable(project / "bin" / "openssl", "#!/bin/bash\n")
    result = run_setup(project, "--test")
    assert result.returncode != 0
    assert "E: Unable to locate package openjdk-17-jre-headless" in result.stderr


def test_setup_without_tests_needs_neither_kcat_nor_java(project: Path) -> None:
    result = run_setup(project)
    assert result.returncode == 0, result.stderr
    assert os.listdir(project / ".venv" / "bin") == ["python"]


def test_a_changed_c_source_or_a_missing_module_installs_again(project: Path) -> None:
    """The two C modules are built by the install: a newer _scan.c, _read.c or setup.py, or
    a work tree without one of the built modules, is installed again; otherwise nothing is."""
    assert run_setup(project).returncode == 0
    again = run_setup(project)
    assert again.returncode == 0 and "Successfully installed" not in again.stdout
    marker = project / ".venv" / ".pykraft-installed"
    for changed in ("src/pykraft/records/_scan.c", "src/pykraft/metadata/_read.c", "setup.py"):
        os.utime(project / changed, (marker.stat().st_mtime + 5,) * 2)
        assert "Successfully installed" in run_setup(project).stdout, changed
    for module in ("records/_scan", "metadata/_read"):
        for built in (project / "src" / "pykraft").glob(f"{module}.*.so"):
            built.unlink()
        assert "Successfully installed" in run_setup(project).stdout, module


def test_a_missing_compiler_or_headers_is_named(project: Path) -> None:
    (project / "bin" / "cc").unlink()
    result = run_setup(project)
    assert result.returncode != 0
    assert "needs a C compiler" in result.stderr and "install the OS package gcc" in result.stderr
    assert not (project / ".venv" / ".pykraft-installed").exists()
    (project / "bin" / "cc").symlink_to(shutil.which("cc") or "/usr/bin/cc")
    result = run_setup(project, FAKE_INCLUDE=str(project / "nowhere"))
    assert result.returncode != 0
    assert "install the OS package python3.11-dev" in result.stderr
