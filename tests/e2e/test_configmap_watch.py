"""A Kubernetes ConfigMap volume update reaches the file watch.

The kubelet lays a ConfigMap volume out as
    DIR/..2026_xx/config.yaml      the data, in a timestamped directory
    DIR/..data -> ..2026_xx        a symlink to the current directory
    DIR/config.yaml -> ..data/config.yaml
and updates it by writing a new timestamped directory, renaming a new
symlink over ..data (atomic) and removing the old directory.  The Helm
chart mounts the ConfigMap this way (as a directory, never subPath)."""
import os

import httpx

from conftest import VSR_BIN, Proc, free_port, wait_until
from test_config_reload import Api, doc, served, bump_until


def write_version(d, name, text):
    sub = d / name
    sub.mkdir()
    (sub / "config.yaml").write_text(text)


def swap(d, new):
    tmp = d / "..data_tmp"
    os.symlink(new, tmp)
    os.rename(tmp, d / "..data")


def test_configmap_symlink_swap_is_picked_up(fakellm, tmp_path):
    b = fakellm("a")
    port, mport, metrics = free_port(), free_port(), free_port()
    d = tmp_path / "etc-vsr"
    d.mkdir()
    base = doc(port, mport, b)
    write_version(d, "..2026_01_01_00_00_00.1", base)
    os.symlink("..2026_01_01_00_00_00.1", d / "..data")
    os.symlink("..data/config.yaml", d / "config.yaml")

    proc = Proc([VSR_BIN, "serve", "--config", str(d / "config.yaml"), "--workers", "1",
                 "--metrics-listen", f"127.0.0.1:{metrics}"], tmp_path, "vsr")
    try:
        def ready():
            assert proc.p.poll() is None, proc.output()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200
            except httpx.TransportError:
                return False
        wait_until(ready, what="vsr /ready")

        class V:
            pass
        v = V()
        v.api = Api(mport)
        v.post_chat = lambda body, **kw: httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                                    json=body, timeout=30, **kw)
        assert served(v) == (200, 1, "one")

        for version, tag in ((2, "two"), (3, "three")):
            new = f"..2026_01_01_00_00_0{version}.1"
            old = os.readlink(d / "..data")
            write_version(d, new, base.replace('value: "one"', f'value: "{tag}"'))
            swap(d, new)
            (d / old / "config.yaml").unlink()
            (d / old).rmdir()
            bump_until(v, version, f"the ..data swap to version {version} to activate")
            assert served(v) == (200, version, tag)
    finally:
        proc.stop()
        proc.assert_clean_exit()
