"""Packaging checks (issue 4 items 12-13): the example config, the systemd unit, the
`cmake --install` tree, the Dockerfile, and the default-model / quick-start scripts.

Needs: a C compiler and libcjson-dev (config loader harness, MemoryDenyWriteExecute
wrapper), cmake, and `systemd-analyze` (Debian package `systemd`; the unit tests skip
only when it is absent, and fail then under CI=true). The inferd binary comes from $INFERD_BIN or build/inferd,
and `cmake --install` runs on that binary's build directory, which must have been
configured with cmake/install.cmake included from CMakeLists.txt.

systemd-analyze verify refuses a unit whose ExecStart= binary does not exist, and
configs/inferd.service names /usr/local/bin/inferd. The test therefore verifies the
unit as `cmake --install` put it into a temporary prefix, with the ExecStart= path
rewritten to that prefix's bin/inferd (nothing else is changed).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from requires import skip_unless_ci

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "configs" / "inferd.service"
EXAMPLE = REPO / "configs" / "inferd.example.json"
DOCKERFILE = REPO / "docker" / "Dockerfile"
CONFIG_C = REPO / "src" / "server" / "config.c"
FETCH = REPO / "scripts" / "fetch_default_model.sh"
QUICKSTART = REPO / "scripts" / "quickstart.sh"

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.fixture
def _systemd_analyze():
    if SYSTEMD_ANALYZE is None:
        skip_unless_ci("systemd-analyze not found (Debian: apt-get install systemd)")


NEEDS_SYSTEMD = pytest.mark.usefixtures("_systemd_analyze")


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 600)
    return subprocess.run([str(c) for c in cmd], **kw)


def unit_settings(text: str) -> dict[str, list[str]]:
    """{section.key: [values...]} of a unit file (comments and blank lines dropped)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        k, _, v = line.partition("=")
        out.setdefault(f"{section}.{k.strip()}", []).append(v.strip())
    return out


# ---------------------------------------------------------------------------------------
# example config
# ---------------------------------------------------------------------------------------

def option_table_names() -> set[str]:
    """Option names of the declarative table in src/server/config.c ("max-num-seqs")."""
    src = CONFIG_C.read_text()
    body = src[src.index("OPTS[] = {"):]
    body = body[:body.index("\n};")]
    names = set(re.findall(r'^\s*\{\s*"([a-z0-9-]+)"\s*,', body, re.M))
    assert len(names) > 20, f"could not parse the option table of {CONFIG_C}"
    return names


def test_example_config_is_a_json_object():
    cfg = json.loads(EXAMPLE.read_text())
    assert isinstance(cfg, dict) and cfg
    for k in ("model", "host", "port", "shutdown_timeout", "max_num_seqs", "api_key_file"):
        assert k in cfg, f"example config lacks '{k}'"
    assert cfg["host"] == "127.0.0.1", "the example must keep the safe default bind address"
    assert "api_key" not in cfg, "no secrets in the example; use api_key_file"


def test_example_config_keys_are_options_of_the_config_table():
    names = option_table_names()
    cfg = json.loads(EXAMPLE.read_text())
    unknown = sorted(k for k in cfg if k.replace("_", "-") not in names)
    assert not unknown, f"keys not in src/server/config.c's option table: {unknown}"


HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "server/config.h"
int main(int argc, char **argv) {
    server_config c;
    char err[512] = "";
    server_config_init(&c);
    char *av[] = {"serve", "--config", argv[1], NULL};
    if (argc != 2 || server_config_load(&c, 3, av, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char *j = server_config_effective_json(&c);
    puts(j);
    free(j);
    server_config_deinit(&c);
    return 0;
}
"""


def test_example_config_loads_through_the_real_config_loader(tmp_path):
    """Compile src/server/config.c with a tiny main and load the example with it: every
    key must be accepted with its type and bounds, exactly as `inferd serve --config`."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not cc:
        pytest.fail("no C compiler (apt-get install build-essential)")
    (tmp_path / "h.c").write_text(HARNESS)
    exe = tmp_path / "h"
    srcs = [tmp_path / "h.c", CONFIG_C, REPO / "src/util/buf.c", REPO / "src/util/utf8.c",
            REPO / "src/util/common.c"]
    b = run([cc, "-std=c11", "-D_GNU_SOURCE", f"-I{REPO / 'src'}", f"-I{REPO / 'include'}",
             "-I/usr/include/cjson", *srcs, "-lcjson", "-lm", "-lpthread", "-o", exe])
    if b.returncode:
        skip_unless_ci("the config loader harness no longer builds from config.c + buf.c + "
                    "utf8.c + common.c alone (the key check above still runs):\n" + b.stderr[-2000:])
    r = run([exe, EXAMPLE])
    assert r.returncode == 0, f"config loader rejected {EXAMPLE.name}: {r.stderr}"
    eff = json.loads(r.stdout)
    cfg = json.loads(EXAMPLE.read_text())
    assert eff["model"] == cfg["model"]
    assert eff["port"] == cfg["port"]
    assert eff["shutdown-timeout"] == cfg["shutdown_timeout"]


# ---------------------------------------------------------------------------------------
# systemd unit
# ---------------------------------------------------------------------------------------

def test_unit_static_settings():
    s = unit_settings(UNIT.read_text())
    one = {k: v[-1] for k, v in s.items()}
    assert one["Service.ExecStart"] == "/usr/local/bin/inferd serve --config /etc/inferd/inferd.json"
    assert one["Service.Type"] in ("simple", "exec")
    assert one.get("Service.DynamicUser") == "yes" or "Service.User" in one
    for k, v in {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "PrivateDevices": "no", "DevicePolicy": "closed",
        "CapabilityBoundingSet": "", "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
        "RestrictNamespaces": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "RestrictRealtime": "yes",
        "RestrictSUIDSGID": "yes", "KillSignal": "SIGTERM", "Restart": "on-failure",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
        "StateDirectory": "inferd", "CacheDirectory": "inferd",
    }.items():
        assert one.get(f"Service.{k}") == v, f"{k}={one.get('Service.' + k)!r}, want {v!r}"
    assert "@system-service" in s["Service.SystemCallFilter"]
    assert any("nvidia" in d for d in s["Service.DeviceAllow"])
    # the stop timeout must outlast the graceful drain of the example config
    drain = json.loads(EXAMPLE.read_text())["shutdown_timeout"]
    m = re.fullmatch(r"(\d+)s?", one["Service.TimeoutStopSec"])
    assert m and int(m.group(1)) > drain + 5, "TimeoutStopSec must exceed shutdown_timeout"


# ---------------------------------------------------------------------------------------
# cmake --install
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def install_tree(inferd_bin, tmp_path_factory) -> Path:
    top = (REPO / "CMakeLists.txt").read_text()
    if not re.search(r"^\s*include\s*\(\s*cmake/install\.cmake\s*\)", top, re.M):
        pytest.fail("CMakeLists.txt does not include(cmake/install.cmake)")
    build = Path(inferd_bin).resolve().parent
    if not (build / "CMakeCache.txt").is_file():
        pytest.fail(f"{build} (the directory of {inferd_bin}) is not a CMake build directory")
    # make sure the build dir has seen install.cmake (reconfigures if CMakeLists changed)
    r = run(["cmake", "--build", build, "--target", "inferd"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    prefix = tmp_path_factory.mktemp("prefix")
    r = run(["cmake", "--install", build, "--prefix", prefix])
    assert r.returncode == 0, r.stdout + r.stderr
    return prefix


def test_cmake_install_tree(install_tree):
    p = install_tree
    expected = ["bin/inferd", "lib/systemd/system/inferd.service",
                "share/inferd/inferd.example.json", "share/doc/inferd/README.md",
                "share/doc/inferd/LICENSE", "share/doc/inferd/default-model.md"]
    missing = [e for e in expected if not (p / e).is_file()]
    assert not missing, f"missing from the install tree: {missing}"
    assert os.access(p / "bin/inferd", os.X_OK)
    assert run([p / "bin/inferd", "--help"]).returncode == 0
    assert (p / "share/inferd/inferd.example.json").read_text() == EXAMPLE.read_text()
    unit = (p / "lib/systemd/system/inferd.service").read_text()
    exec_start = unit_settings(unit)["Service.ExecStart"][-1]
    assert re.fullmatch(r"/\S*/bin/inferd serve --config /etc/inferd/inferd\.json", exec_start)


def installed_unit_with_real_binary(install_tree: Path) -> str:
    unit = (install_tree / "lib/systemd/system/inferd.service").read_text()
    binary = unit_settings(unit)["Service.ExecStart"][-1].split()[0]
    return unit.replace(f"ExecStart={binary} ", f"ExecStart={install_tree / 'bin/inferd'} ")


def systemd_verify(unit_text: str, tmp_path: Path) -> str:
    path = tmp_path / "inferd.service"
    path.write_text(unit_text)
    r = run([SYSTEMD_ANALYZE, "verify", path], cwd=tmp_path)
    out = (r.stdout + r.stderr).strip()
    return out if out or r.returncode == 0 else f"exit status {r.returncode}"


@NEEDS_SYSTEMD
def test_systemd_analyze_verify_is_clean(install_tree, tmp_path):
    out = systemd_verify(installed_unit_with_real_binary(install_tree), tmp_path)
    assert out == "", f"systemd-analyze verify is not clean:\n{out}"


@NEEDS_SYSTEMD
def test_systemd_analyze_verify_flags_a_broken_unit(install_tree, tmp_path):
    """The clean verdict above means something only if verify reports problems at all
    (a bad value is a warning on stderr with exit status 0, hence "no output" above)."""
    bad = installed_unit_with_real_binary(install_tree).replace("ProtectSystem=strict",
                                                                "ProtectSystem=bogus")
    assert "bogus" in systemd_verify(bad, tmp_path)


# ---------------------------------------------------------------------------------------
# MemoryDenyWriteExecute=yes: run inferd under the same seccomp filter systemd installs
# ---------------------------------------------------------------------------------------

MDWE_C = r"""
/* systemd's MemoryDenyWriteExecute=yes filter (src/shared/seccomp-util.c): mmap with
 * PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect with PROT_EXEC and shmat with SHM_EXEC
 * fail with EPERM. Installs it, checks it bites, then execs argv[1...]. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error unsupported architecture
#endif
#ifndef __NR_pkey_mprotect
#define __NR_pkey_mprotect -1
#endif
#define A2 offsetof(struct seccomp_data, args[2])
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 6, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)__NR_pkey_mprotect, 5, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_shmat, 7, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, A2), /* 9: mmap */
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, PROT_WRITE | PROT_EXEC),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_WRITE | PROT_EXEC, 7, 8),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, A2), /* 12: mprotect, pkey_mprotect */
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, PROT_EXEC),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_EXEC, 4, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, A2), /* 15: shmat */
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, SHM_EXEC),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SHM_EXEC, 1, 2),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM), /* 19 */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),         /* 20 */
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("mdwe: seccomp");
        return 3;
    }
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED || errno != EPERM) { fprintf(stderr, "mdwe: W+X mmap not refused\n"); return 4; }
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || !mprotect(p, 4096, PROT_READ | PROT_EXEC) || errno != EPERM) {
        fprintf(stderr, "mdwe: mprotect(PROT_EXEC) not refused\n");
        return 4;
    }
    execvp(argv[1], argv + 1);
    perror("mdwe: exec");
    return 127;
}
"""


def test_inferd_runs_under_memory_deny_write_execute(inferd_bin, shared_models, tmp_path):
    """The unit sets MemoryDenyWriteExecute=yes; inferd must load and generate under it.
    With a CUDA build on a GPU host this exercises libcudart/libcublas/libcuda too."""
    if sys.platform != "linux":
        pytest.skip("seccomp is Linux-only")
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not cc:
        pytest.fail("no C compiler (apt-get install build-essential)")
    (tmp_path / "mdwe.c").write_text(MDWE_C)
    wrap = tmp_path / "mdwe"
    b = run([cc, "-O1", "-o", wrap, tmp_path / "mdwe.c"])
    assert b.returncode == 0, b.stderr
    assert run([wrap, "true"]).returncode == 0, "the MDWE filter self-check failed"
    model = shared_models / "shakespeare-target-Q4_K_M.gguf"
    args = ["generate", "-m", model, "-p", "ROMEO:", "-n", "8", "--temp", "0"]
    plain = run([inferd_bin, *args])
    assert plain.returncode == 0, plain.stderr
    sandboxed = run([wrap, inferd_bin, *args])
    assert sandboxed.returncode == 0, f"inferd fails under MemoryDenyWriteExecute:\n{sandboxed.stderr}"
    assert sandboxed.stdout == plain.stdout


# ---------------------------------------------------------------------------------------
# Dockerfile (static: no Docker daemon in CI)
# ---------------------------------------------------------------------------------------

def docker_stages(text: str) -> dict[str, dict]:
    """{stage name: {"from": image, "lines": [instructions...]}}, continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    stages: dict[str, dict] = {}
    cur = None
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", line, re.I)
        if m:
            cur = {"from": m.group(1), "lines": []}
            stages[(m.group(2) or f"#{len(stages)}").lower()] = cur
        elif cur is not None:
            cur["lines"].append(line)
    return stages


def test_dockerfile_has_cpu_and_cuda_targets():
    st = docker_stages(DOCKERFILE.read_text())
    assert {"cpu", "cuda", "cpu-build", "cuda-build"} <= set(st), sorted(st)
    assert st["cpu-build"]["from"].startswith("debian:")
    assert re.fullmatch(r"debian:\$\{DEBIAN_VERSION\}-slim|debian:12-slim", st["cpu"]["from"])
    assert st["cuda-build"]["from"].startswith("nvidia/cuda:") and "devel" in st["cuda-build"]["from"]
    assert st["cuda"]["from"].startswith("nvidia/cuda:") and "runtime" in st["cuda"]["from"]
    assert list(st)[-1] == "default" and st["default"]["from"] == "cpu", \
        "the last stage (built without --target) should be the CPU image"
    for name in ("cpu", "cuda"):
        lines = st[name]["lines"]
        instr = lambda k: [l for l in lines if l.upper().startswith(k + " ")]  # noqa: E731
        hc = instr("HEALTHCHECK")
        assert hc and "/health" in hc[0], f"{name}: no HEALTHCHECK on /health"
        assert any(re.search(r"\b8000\b", l) for l in instr("EXPOSE")), f"{name}: no EXPOSE 8000"
        user = instr("USER")
        assert user and user[-1].split()[1].split(":")[0] not in ("0", "root"), f"{name}: runs as root"
        ep = instr("ENTRYPOINT")
        assert ep and json.loads(ep[-1][len("ENTRYPOINT"):].strip())[-2:] == ["/usr/local/bin/inferd", "serve"]
        assert any("/models" in l for l in instr("ENV")), f"{name}: default model not under /models"
        assert any(f"--from={name}-build" in l for l in instr("COPY")), f"{name}: not multi-stage"


def test_dockerignore_keeps_what_the_build_needs():
    import fnmatch
    pats = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
            if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p.rstrip("/")) or fnmatch.fnmatch(path.split("/")[0], p.rstrip("/"))
                   for p in pats if not p.startswith("!"))

    for needed in ("CMakeLists.txt", "cmake/install.cmake", "src/main.c", "configs/inferd.service",
                   "configs/inferd.example.json", "README.md", "LICENSE", "docs/default-model.md",
                   "docker/README.md", "include/inferd.h", "kernels"):
        assert not ignored(needed), f".dockerignore drops {needed}, which the image build needs"
    for junk in ("build", "build-pkg", "models-cache", ".git"):
        assert ignored(junk), f".dockerignore should drop {junk}"


# ---------------------------------------------------------------------------------------
# default model and quick start scripts (offline parts only)
# ---------------------------------------------------------------------------------------

def test_scripts_parse_and_are_executable():
    for s in (FETCH, QUICKSTART):
        assert os.access(s, os.X_OK), f"{s} is not executable"
        assert run(["bash", "-n", s]).returncode == 0
        if shutil.which("shellcheck"):
            r = run(["shellcheck", "-S", "warning", s])
            assert r.returncode == 0, r.stdout
    assert re.search(r'^exec "\$BUILD_DIR/inferd" serve "\$@"$', QUICKSTART.read_text(), re.M)


def test_fetch_refuses_a_wrong_file_without_touching_it(tmp_path):
    junk = tmp_path / "default.gguf"
    junk.write_bytes(b"GGUF not really")
    r = run([FETCH, junk])
    assert r.returncode == 1
    assert "not the expected file" in r.stderr
    assert junk.read_bytes() == b"GGUF not really"
    r = run([FETCH, "--no-such-option"])
    assert r.returncode == 1 and "unknown option" in r.stderr


def test_fetched_default_model_is_verified_and_loads(inferd_bin):
    """Only when the model was fetched already (the test never downloads 1.1 GB)."""
    model = REPO / "models-cache" / "default.gguf"
    if not model.is_file():
        pytest.skip("models-cache/default.gguf not fetched (scripts/fetch_default_model.sh)")
    r = run([FETCH, model])
    assert r.returncode == 0 and "nothing to do" in r.stderr, r.stderr
    info = run([inferd_bin, "info", "-m", model])
    assert info.returncode == 0, info.stderr
    assert "qwen2" in info.stdout
