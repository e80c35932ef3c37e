"""The deployment examples (issue 13): deploy/k8s/inferd-pd.yaml validates against the
Kubernetes API schemas (kubernetes-validate, offline), probes and GPU requests are in
place; deploy/compose/docker-compose.yml wires every decode instance to the prefill
instance's KV port and nginx's least_conn upstream to the decode instances; every flag
they pass to `inferd serve` is one it knows."""
from __future__ import annotations

import re
import subprocess

import pytest

from requires import require_module
from server_util import REPO_ROOT, inferd_bin

yaml = require_module("yaml", "pip install -r requirements-dev.txt")
kv = require_module("kubernetes_validate", "pip install -r requirements-dev.txt")

K8S = REPO_ROOT / "deploy" / "k8s" / "inferd-pd.yaml"
COMPOSE = REPO_ROOT / "deploy" / "compose" / "docker-compose.yml"
NGINX = REPO_ROOT / "deploy" / "compose" / "nginx.conf"


def serve_flags() -> set[str]:
    out = subprocess.run([str(inferd_bin()), "serve", "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"(--[a-z0-9-]+)", out.stdout + out.stderr))


def check_args(args: list[str], flags: set[str]):
    for a in args:
        if a.startswith("--"):
            assert a in flags, f"{a} is not an inferd serve flag"


def test_k8s_manifests():
    docs = [d for d in yaml.safe_load_all(K8S.read_text()) if d]
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == [("Deployment", "inferd-decode"), ("Deployment", "inferd-prefill"),
                     ("Service", "inferd"), ("Service", "inferd-prefill-kv")]
    for d in docs:
        kv.validate(d, "1.30", strict=True)  # raises on a schema violation
    flags = serve_flags()
    deps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    svcs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for name, d in deps.items():
        c = d["spec"]["template"]["spec"]["containers"][0]
        check_args(c["args"], flags)
        assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
        assert c["livenessProbe"]["httpGet"]["path"] == "/health"
        assert c["resources"]["requests"]["nvidia.com/gpu"] == 1
        # the services select these pods
        sel = d["spec"]["selector"]["matchLabels"]
        assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    dec = deps["inferd-decode"]["spec"]["template"]["spec"]["containers"][0]["args"]
    pre = deps["inferd-prefill"]["spec"]["template"]["spec"]["containers"][0]["args"]
    host, port = dec[dec.index("--pd-prefill") + 1].split(":")
    assert host in svcs and int(port) == svcs[host]["spec"]["ports"][0]["port"]
    assert pre[pre.index("--pd-kv-port") + 1] == port
    assert svcs["inferd-prefill-kv"]["spec"]["selector"] == deps["inferd-prefill"]["spec"]["selector"]["matchLabels"]
    assert svcs["inferd"]["spec"]["selector"] == deps["inferd-decode"]["spec"]["selector"]["matchLabels"]


def test_compose_and_nginx():
    c = yaml.safe_load(COMPOSE.read_text())
    flags = serve_flags()
    svc = c["services"]
    pre = svc["prefill"]["command"]
    check_args(pre, flags)
    assert pre[pre.index("--role") + 1] == "prefill"
    kv_port = pre[pre.index("--pd-kv-port") + 1]
    decodes = [n for n, s in svc.items() if "--role" in s.get("command", []) and
               s["command"][s["command"].index("--role") + 1] == "decode"]
    assert len(decodes) == 2
    for n in decodes:
        cmd = svc[n]["command"]
        check_args(cmd, flags)
        assert cmd[cmd.index("--pd-prefill") + 1] == f"prefill:{kv_port}"
    conf = NGINX.read_text()
    assert "least_conn;" in conf and "proxy_buffering off;" in conf
    upstream = set(re.findall(r"server (\w+):8000", conf))
    assert upstream == set(decodes)
