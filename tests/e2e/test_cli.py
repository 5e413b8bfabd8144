"""The command line surface: serve --help lists every flag under the group
that says where it applies."""
import subprocess

from conftest import VSR_BIN

GROUPS = {
    "general": ["--config", "--workers", "--gateway", "--log-level", "--drain-timeout", "--access-log",
                "--config-watch", "--config-audit-log"],
    "management": ["--management-token-file", "--management-token-env"],
    "metrics": ["--metrics-listen"],
    "extproc": ["--extproc-listen"],
}


def test_serve_help_lists_flags_by_group():
    r = subprocess.run([VSR_BIN, "serve", "--help"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    headings = [i for i, l in enumerate(lines) if l.startswith("   ") and not l.startswith("    ") and ":" in l]
    names = [lines[i].split()[0] for i in headings]
    assert names == list(GROUPS), names
    assert "only with --gateway extproc" in lines[headings[names.index("extproc")]]
    bounds = headings + [len(lines)]
    for k, group in enumerate(names):
        section = lines[bounds[k] + 1:bounds[k + 1]]
        listed = [l.split()[0] for l in section if l.startswith("    --")]
        assert listed == GROUPS[group], (group, listed)


def test_extproc_flag_outside_its_group_is_a_usage_error():
    r = subprocess.run([VSR_BIN, "serve", "--extproc-listen", "127.0.0.1:1"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 64 and "vsr: --extproc-listen applies to --gateway extproc only" in r.stderr


def test_extproc_flag_inside_its_group_passes_the_group_check(tmp_path):
    # no configuration at the default path: parsing got past the group check to the next one
    r = subprocess.run([VSR_BIN, "serve", "--gateway", "extproc", "--extproc-listen", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=20, cwd=tmp_path)
    assert r.returncode == 64 and "applies to" not in r.stderr and "does not exist" in r.stderr, r.stderr


def test_management_token_file_and_env_exclude_each_other(tmp_path):
    r = subprocess.run([VSR_BIN, "serve", "--management-token-file", "t", "--management-token-env", "T"],
                       capture_output=True, text=True, timeout=20, cwd=tmp_path)
    assert r.returncode == 64 and 'unknown or incomplete option "--management-token-env"' in r.stderr, r.stderr
