#!/usr/bin/python3
"""The Kubernetes manifests of deploy/k8s agree with the binary and with the contract.

Usage: manifests_test.py INFERA_BINARY

- `kubectl kustomize` renders deploy/k8s/base and deploy/k8s/examples/inference-pool;
- the router Deployment: liveness on /livez, readiness on /readyz, a termination grace period
  longer than --drain-delay-s + --shutdown-grace-s, non-root, read-only root, no capabilities;
  its Service, PodDisruptionBudget, ServiceAccount and RoleBinding fit together;
- the Role grants get/list/watch on pods (and on inferencepools) and nothing else;
- every `--flag` in the args of an `infera` container (the router's, the mock workers') is one
  that `INFERA_BINARY <command> --help` lists, and every $(VAR) in them is in its env;
- the worker examples carry what discovery reads (docs/contracts.md section 8): the selector's
  label, a container port named http equal to infera.ai/port, KV-event annotations equal to the
  ports of the engine's KV-events config, infera.ai/engine, PYTHONHASHSEED=0, a readiness probe
  on /health, and llm-d.ai/role / sglang.ai/bootstrap-port where they apply;
- deploy/k8s/examples/mock-worker-pod.yaml is the plain Pod the e2e tests create.
"""

import glob
import json
import os
import re
import subprocess
import sys

import yaml  # Debian python3-yaml (a dependency of python3-kubernetes, scripts/packages/test.txt)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "deploy", "k8s")
WORKER_LABEL = ("app.kubernetes.io/component", "infera-worker")
ROLES = {"prefill", "decode", "prefill-decode"}
READ_VERBS = {"get", "list", "watch"}


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, ok, what):
        if ok:
            self.passed += 1
            print("ok   " + what)
        else:
            self.failed.append(what)
            print("FAIL " + what)
        return ok


def kustomize(directory):
    out = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip()
    return [d for d in yaml.safe_load_all(out.stdout) if d], ""


def load_file(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def help_flags(binary, command):
    out = subprocess.run([binary, *command, "--help"], capture_output=True, text=True)
    flags = set()
    for line in (out.stdout + out.stderr).splitlines():
        if not line.startswith("  --"):
            continue
        spec = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        flags.update(re.findall(r"--[a-z0-9][a-z0-9-]*", spec))
    return flags


def pod_spec(obj):
    if obj["kind"] == "Pod":
        return obj["spec"]
    return obj["spec"]["template"]["spec"]


def pod_meta(obj):
    if obj["kind"] == "Pod":
        return obj["metadata"]
    return obj["spec"]["template"]["metadata"]


def name_of(obj, source):
    return "%s %s/%s" % (source, obj["kind"], obj["metadata"]["name"])


def flag_values(args):
    """{--flag: value or None} of an argument list (`--flag value`, `--flag=value`, `--switch`)."""
    values = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                values[k] = v
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                values[a] = str(args[i + 1])
                i += 1
            else:
                values[a] = None
        i += 1
    return values


def infera_containers(obj):
    spec = pod_spec(obj)
    for c in spec.get("containers", []):
        argv = list(c.get("command", [])) + [str(a) for a in c.get("args", [])]
        if argv and os.path.basename(argv[0]) == "infera":
            yield c, argv[1:]
        elif not c.get("command") and c.get("image", "").split(":")[0].endswith("infera"):
            yield c, argv  # the image's ENTRYPOINT is infera


def check_flags(t, binary, obj, source, helps):
    for c, args in infera_containers(obj):
        command = []
        for a in args:
            if a.startswith("-"):
                break
            command.append(a)
        key = tuple(command)
        if key not in helps:
            helps[key] = help_flags(binary, command)
        known = helps[key]
        t.check(bool(known), "%s: `infera %s --help` lists flags" % (name_of(obj, source), " ".join(command)))
        used = [a.split("=", 1)[0] for a in args if a.startswith("--")]
        missing = sorted({f for f in used if f not in known})
        t.check(not missing, "%s container %s: every flag is in `infera %s --help`%s"
                % (name_of(obj, source), c["name"], " ".join(command),
                   "" if not missing else " (not listed: %s)" % ", ".join(missing)))
        pod = pod_spec(obj)
        t.check(pod.get("enableServiceLinks") is False,
                "%s: enableServiceLinks is false (no <SERVICE>_PORT=tcp://... in an infera pod)"
                % name_of(obj, source))
        env = {e["name"] for e in c.get("env", [])}
        refs = sorted({v for a in args for v in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a)})
        t.check(all(r in env for r in refs), "%s container %s: $(VAR) references %s are in env"
                % (name_of(obj, source), c["name"], refs))


def security_ok(pod, container):
    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    return (non_root and uid != 0 and sc.get("readOnlyRootFilesystem") is True
            and sc.get("allowPrivilegeEscalation") is False
            and "ALL" in sc.get("capabilities", {}).get("drop", []))


def probe_path(container, kind):
    return container.get(kind, {}).get("httpGet", {}).get("path")


def probe_targets_http(container, kind):
    port = container.get(kind, {}).get("httpGet", {}).get("port")
    named = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    return port == "http" and "http" in named or port in named.values()


def check_router(t, docs, source):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"):
        t.check(len(by_kind.get(kind, [])) == 1, "%s renders one %s" % (source, kind))
    if not by_kind.get("Deployment"):
        return
    dep = by_kind["Deployment"][0]
    pod = pod_spec(dep)
    labels = pod_meta(dep).get("labels", {})
    routers = [c for c in pod["containers"] if c["name"] == "infera"]
    if not t.check(len(routers) == 1, "%s: the router Deployment has a container named infera" % source):
        return
    router = routers[0]
    args = flag_values([str(a) for a in router.get("args", [])])
    t.check(labels.get("app.kubernetes.io/component") == "infera-router",
            "%s: router pods carry app.kubernetes.io/component=infera-router (contract section 12)" % source)
    t.check(probe_path(router, "livenessProbe") == "/livez" and probe_targets_http(router, "livenessProbe"),
            "%s: livenessProbe is GET /livez on the http port" % source)
    t.check(probe_path(router, "readinessProbe") == "/readyz" and probe_targets_http(router, "readinessProbe"),
            "%s: readinessProbe is GET /readyz on the http port" % source)
    try:
        drain, grace = float(args["--drain-delay-s"]), float(args["--shutdown-grace-s"])
        period = pod.get("terminationGracePeriodSeconds", 30)
        t.check(period > drain + grace, "%s: terminationGracePeriodSeconds %s > --drain-delay-s %s + "
                "--shutdown-grace-s %s" % (source, period, drain, grace))
    except (KeyError, TypeError, ValueError):
        t.check(False, "%s: the router sets --drain-delay-s and --shutdown-grace-s" % source)
    t.check(args.get("--discovery-backend") == "k8s", "%s: --discovery-backend k8s" % source)
    t.check(args.get("--admin-token-file", "").startswith("/") and any(
        args["--admin-token-file"].startswith(m["mountPath"].rstrip("/") + "/")
        for m in router.get("volumeMounts", [])),
        "%s: --admin-token-file is inside a mounted volume" % source)
    for c in pod.get("initContainers", []) + pod["containers"]:
        t.check(security_ok(pod, c), "%s: container %s runs as non-root with a read-only root and no "
                "capabilities" % (source, c["name"]))

    role = by_kind.get("Role", [{}])[0]
    rules = role.get("rules", [])
    pod_rules = [r for r in rules if "pods" in r.get("resources", [])]
    t.check(len(pod_rules) == 1 and pod_rules[0].get("apiGroups") == [""]
            and set(pod_rules[0].get("verbs", [])) == READ_VERBS
            and pod_rules[0].get("resources") == ["pods"],
            "%s: the Role grants exactly get, list, watch on pods" % source)
    pool_rules = [r for r in rules if "inferencepools" in r.get("resources", [])]
    t.check(len(pool_rules) == 1 and pool_rules[0].get("apiGroups") == ["inference.networking.k8s.io"]
            and set(pool_rules[0].get("verbs", [])) == READ_VERBS,
            "%s: the Role grants get, list, watch on inferencepools.inference.networking.k8s.io" % source)
    t.check(all(set(r.get("verbs", [])) <= READ_VERBS for r in rules) and len(rules) == 2,
            "%s: the Role grants nothing else" % source)

    sa = pod.get("serviceAccountName")
    binding = by_kind.get("RoleBinding", [{}])[0]
    t.check(binding.get("roleRef", {}).get("name") == role.get("metadata", {}).get("name")
            and any(s.get("kind") == "ServiceAccount" and s.get("name") == sa
                    and s.get("namespace") == dep["metadata"].get("namespace")
                    for s in binding.get("subjects", [])),
            "%s: the RoleBinding gives the Role to the router's ServiceAccount %s" % (source, sa))
    t.check(sa in [s["metadata"]["name"] for s in by_kind.get("ServiceAccount", [])],
            "%s: the ServiceAccount %s exists" % (source, sa))

    svc = by_kind.get("Service", [{}])[0]
    t.check(any(p.get("port") == 8000 and p.get("targetPort") in ("http", 8000)
                for p in svc.get("spec", {}).get("ports", [])),
            "%s: the Service serves port 8000 from the http port" % source)
    t.check(svc.get("spec", {}).get("selector", {}).items() <= labels.items(),
            "%s: the Service selects the router pods" % source)
    pdb = by_kind.get("PodDisruptionBudget", [{}])[0]
    t.check(pdb.get("spec", {}).get("minAvailable") == 1
            and pdb["spec"].get("selector", {}).get("matchLabels", {}).items() <= labels.items(),
            "%s: the PodDisruptionBudget keeps one router pod" % source)
    t.check(dep["spec"]["selector"]["matchLabels"].items() <= labels.items(),
            "%s: the Deployment's selector matches its pods" % source)
    return args


def kv_ports(container):
    """(events, replay) ports an engine container publishes on, from its args."""
    args = [str(a) for a in container.get("args", [])]
    values = flag_values(args)
    config = values.get("--kv-events-config")
    if config:
        c = json.loads(config)
        port = lambda e: e.rsplit(":", 1)[1] if e else None
        return port(c.get("endpoint")), port(c.get("replay_endpoint"))
    if "--enable-kv-events" in values:  # the documented defaults
        return "5557", "5558"
    return None, None


def check_worker(t, obj, source, selector):
    name = name_of(obj, source)
    meta = pod_meta(obj)
    labels, notes = meta.get("labels", {}), meta.get("annotations", {})
    t.check(selector.items() <= labels.items(), "%s: pods match the router's --k8s-selector %s"
            % (name, ",".join("%s=%s" % kv for kv in selector.items())))
    if obj["kind"] != "Pod":
        t.check(obj["spec"]["selector"]["matchLabels"].items() <= labels.items(),
                "%s: the selector matches its pods" % name)
    engines = [c for c in pod_spec(obj)["containers"] if any(p.get("name") == "http" for p in c.get("ports", []))]
    if not t.check(len(engines) == 1, "%s: one container has a port named http" % name):
        return
    c = engines[0]
    http = [p["containerPort"] for p in c["ports"] if p.get("name") == "http"][0]
    t.check(notes.get("infera.ai/port") == str(http), "%s: infera.ai/port %s is the http port %s"
            % (name, notes.get("infera.ai/port"), http))
    events, replay = kv_ports(c)
    t.check(events is not None and notes.get("infera.ai/kv-events-port") == events,
            "%s: infera.ai/kv-events-port %s is the engine's KV-events port %s"
            % (name, notes.get("infera.ai/kv-events-port"), events))
    t.check(replay is not None and notes.get("infera.ai/kv-replay-port") == replay,
            "%s: infera.ai/kv-replay-port %s is the engine's replay port %s"
            % (name, notes.get("infera.ai/kv-replay-port"), replay))
    config = flag_values([str(a) for a in c.get("args", [])]).get("--kv-events-config")
    topic = json.loads(config).get("topic") if config else "kv-events"
    t.check(notes.get("infera.ai/kv-topic") == topic, "%s: infera.ai/kv-topic is the engine's topic %s"
            % (name, topic))
    engine = notes.get("infera.ai/engine")
    t.check(engine in ("vllm", "sglang"), "%s: infera.ai/engine is vllm or sglang (%s)" % (name, engine))
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    t.check(env.get("PYTHONHASHSEED") == "0", "%s: PYTHONHASHSEED=0" % name)
    t.check(probe_path(c, "readinessProbe") == "/health" and probe_targets_http(c, "readinessProbe"),
            "%s: readinessProbe is GET /health on the http port" % name)
    role = labels.get("llm-d.ai/role")
    if role is not None:
        t.check(role in ROLES, "%s: llm-d.ai/role %s is one of %s" % (name, role, sorted(ROLES)))
    values = flag_values([str(a) for a in c.get("args", [])])
    if values.get("--disaggregation-mode") == "prefill":
        t.check(notes.get("sglang.ai/bootstrap-port") == values.get("--disaggregation-bootstrap-port", "8998"),
                "%s: sglang.ai/bootstrap-port is the prefill's --disaggregation-bootstrap-port" % name)
    if "--disaggregation-mode" in values:
        want = {"prefill": "prefill", "decode": "decode", "null": "prefill-decode"}[values["--disaggregation-mode"]]
        t.check(role == want, "%s: llm-d.ai/role %s matches --disaggregation-mode" % (name, role))


def selector_of(args):
    selector = {}
    for term in (args or {}).get("--k8s-selector", "").split(","):
        if "=" in term:
            k, v = term.split("=", 1)
            selector[k.strip().rstrip("=")] = v.strip()
    return selector


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    t = Checks()
    helps = {}

    base, err = kustomize(os.path.join(K8S, "base"))
    router_args = {}
    if t.check(base is not None, "kubectl kustomize deploy/k8s/base renders%s" % (": " + err if err else "")):
        router_args = check_router(t, base, "base") or {}
        for d in base:
            check_flags(t, binary, d, "base", helps) if d["kind"] == "Deployment" else None
    selector = selector_of(router_args)
    t.check(selector == dict([WORKER_LABEL]), "base: the router selects %s=%s" % WORKER_LABEL)

    pool_dir = os.path.join(K8S, "examples", "inference-pool")
    pool_docs, err = kustomize(pool_dir)
    if t.check(pool_docs is not None, "kubectl kustomize deploy/k8s/examples/inference-pool renders%s"
               % (": " + err if err else "")):
        args = check_router(t, pool_docs, "inference-pool") or {}
        pools = [d for d in pool_docs if d["kind"] == "InferencePool"]
        for d in pool_docs:
            check_flags(t, binary, d, "inference-pool", helps) if d["kind"] == "Deployment" else None
        if t.check(len(pools) == 1, "inference-pool renders one InferencePool"):
            pool = pools[0]
            t.check(pool["apiVersion"] == "inference.networking.k8s.io/v1"
                    and pool["spec"]["selector"]["matchLabels"] == dict([WORKER_LABEL])
                    and pool["spec"]["targetPorts"] == [{"number": 8000}],
                    "inference-pool: InferencePool v1 selects the workers on port 8000")
            t.check(args.get("--k8s-inference-pool") == pool["metadata"]["name"]
                    and "--k8s-selector" not in args,
                    "inference-pool: the router follows --k8s-inference-pool %s instead of --k8s-selector"
                    % pool["metadata"]["name"])

    for path in sorted(glob.glob(os.path.join(K8S, "examples", "*.yaml"))):
        source = os.path.relpath(path, ROOT)
        try:
            docs = load_file(path)
        except yaml.YAMLError as e:
            t.check(False, "%s parses: %s" % (source, e))
            continue
        for d in docs:
            if d.get("kind") in ("Pod", "Deployment") and pod_meta(d).get("labels", {}).get(WORKER_LABEL[0]) == WORKER_LABEL[1]:
                check_worker(t, d, source, selector or dict([WORKER_LABEL]))
                check_flags(t, binary, d, source, helps)

    pod_path = os.path.join(K8S, "examples", "mock-worker-pod.yaml")
    pods = load_file(pod_path) if os.path.exists(pod_path) else []
    t.check(len(pods) == 1 and pods[0]["kind"] == "Pod" and pods[0]["metadata"].get("name") == "mock-worker-0"
            and "namespace" not in pods[0]["metadata"],
            "mock-worker-pod.yaml is one Pod mock-worker-0 with no namespace")
    if pods:
        engine = [c for c in pods[0]["spec"]["containers"]]
        t.check(len(engine) == 1 and [str(a) for a in engine[0].get("args", [])][:2] == ["engine", "mock"],
                "mock-worker-pod.yaml runs `infera engine mock`")

    print("%d passed, %d failed" % (t.passed, len(t.failed)))
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
