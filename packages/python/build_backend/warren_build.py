"""A PEP 517 build backend in the standard library, for this one pure-Python package.

setuptools, flit or hatchling would have to be downloaded into pip's isolated build
environment, and the machines warren runs on reach no Python package index. A pure-Python
wheel is a zip with three metadata files, so building it here is simpler than any of them.
Supports build_wheel, build_sdist and build_editable (PEP 660: a .pth to this directory).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "warren"


def _project() -> dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return dict(tomllib.load(f)["project"])


def _dist_name() -> str:
    return str(_project()["name"]).replace("-", "_")


def _metadata() -> str:
    p = _project()
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {p['name']}\n"
        f"Version: {p['version']}\n"
        f"Summary: {p.get('description', '')}\n"
        f"Requires-Python: {p.get('requires-python', '>=3.11')}\n"
    )


def _wheel_name() -> str:
    return f"{_dist_name()}-{_project()['version']}-py3-none-any.whl"


def _dist_info() -> str:
    return f"{_dist_name()}-{_project()['version']}.dist-info"


def _package_files() -> list[tuple[str, str]]:
    """(path in the wheel, path on disk) of the package's sources and py.typed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


def _write_wheel(directory: str, files: list[tuple[str, bytes]]) -> str:
    dist_info = _dist_info()
    meta = [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: warren_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    records = []
    path = os.path.join(directory, _wheel_name())
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files + meta:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{name},sha256={digest},{len(data)}")
            whl.writestr(name, data)
        records.append(f"{dist_info}/RECORD,,")
        whl.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return os.path.basename(path)


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    dist_info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(dist_info, exist_ok=True)
    with open(os.path.join(dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    files = []
    for name, disk in _package_files():
        with open(disk, "rb") as f:
            files.append((name, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    base = f"{_dist_name()}-{_project()['version']}"
    path = os.path.join(sdist_directory, f"{base}.tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        disk_files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")), ("build_backend/warren_build.py", __file__)]
        for name, disk in disk_files + _package_files():
            tar.add(disk, arcname=f"{base}/{name}")
        pkg_info = ("Metadata-Version: 2.1\n" + _metadata().split("\n", 1)[1]).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
    return os.path.basename(path)
