#!/usr/bin/python3
"""Holds the Kubernetes API stand-in (apiserver.py beside this file) honest with two real clients:
kubectl (KUBECTL in the environment, else `kubectl` on PATH) and python3-kubernetes.

    /usr/bin/python3 tests/support/k8s/fidelity_test.py [-k SUBSTRING] [-v]

Starts the stand-in on port 0 in a temporary directory, runs every check (each prints one PASS or
FAIL line), and ends with `N passed, N failed`; exit 0 only if all passed. Nothing here sleeps to
synchronise: each wait is for an event or a condition, with a deadline.
"""

import argparse
import http.client
import json
import os
import select
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
APISERVER = os.path.join(HERE, "apiserver.py")
TESTDATA = os.path.join(HERE, "testdata")
KUBECTL = os.environ.get("KUBECTL") or "kubectl"
PY = sys.executable or "/usr/bin/python3"
NS = "default"

import kubernetes  # noqa: E402  (python3-kubernetes)
from kubernetes import client as kclient, config as kconfig, watch as kwatch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402


class Fail(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Fail(msg)


def wait_for(pred, timeout_s, what, step_s=0.02):
    """Polls pred() until it returns something truthy; Fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Fail:
            raise
        except Exception as e:  # a condition that cannot be evaluated yet
            last_exc = e
        if time.monotonic() >= deadline:
            raise Fail("timed out after %.1f s waiting for %s%s" % (timeout_s, what,
                                                                 " (last error: %r)" % last_exc if last_exc else ""))
        threading.Event().wait(step_s)  # a poll interval, not a synchronisation sleep


# ----------------------------------------------------------------------------------------------


class StandIn:
    def __init__(self, workdir, port=0, extra=(), log_name="apiserver.log"):
        self.dir = os.path.join(workdir, "k8s")
        self.workdir = workdir
        self.state_file = os.path.join(workdir, "state.jsonl")
        self.log = open(os.path.join(workdir, log_name), "ab")
        cmd = [PY, APISERVER, "--dir", self.dir, "--port", str(port), "--state-file", self.state_file,
               "--bookmark-interval-s", "0.5", "--max-grace-s", "1.0"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.proc.kill()
                raise Fail("the stand-in did not print its port line (exit %s); see %s"
                           % (self.proc.poll(), self.log.name))
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                b = os.read(self.proc.stdout.fileno(), 1)
                if not b:
                    continue
                line += b
        msg = json.loads(line)
        expect(list(msg) == ["port"], "port line is %r" % line)
        self.port = msg["port"]
        self.ca = os.path.join(self.dir, "ca.crt")
        self.ssl = ssl.create_default_context(cafile=self.ca)
        with open(os.path.join(self.dir, "port")) as f:
            expect(int(f.read()) == self.port, "DIR/port does not hold the port")

    def kubeconfig(self, variant=""):
        return os.path.join(self.dir, "kubeconfig" + variant)

    def token(self):
        with open(os.path.join(self.dir, "token")) as f:
            return f.read().strip()

    def conn(self, timeout=10):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl, timeout=timeout)

    def request(self, method, path, body=None, headers=None, token=True, timeout=10):
        """Raw HTTPS request: (status, headers, parsed JSON or raw bytes)."""
        h = {"Accept": "application/json"}
        if token:
            h["Authorization"] = "Bearer " + (token if isinstance(token, str) else self.token())
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data
        return r.status, r.headers, parsed

    def ctl(self, path, body=None):
        st, _, out = self.request("POST" if body is not None else "GET", "/_standin/" + path,
                                  body=body, token=False)
        expect(200 <= st < 300, "control %s: HTTP %d %r" % (path, st, out))
        return out

    def stats(self):
        return self.ctl("stats")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Fail("the stand-in did not exit within %d s of signal %d" % (timeout, sig))
        self.proc.stdout.close()
        self.log.close()
        return rc


class Kubectl:
    def __init__(self, workdir):
        self.cache = os.path.join(workdir, "kubectl-cache")
        self.env = dict(os.environ)
        self.env.pop("KUBECONFIG", None)
        self.env["HOME"] = workdir

    def run(self, kubeconfig, *args, timeout=30, ok=True, input=None):
        cmd = [KUBECTL, "--kubeconfig", kubeconfig, "--cache-dir", self.cache, "--request-timeout=20s"] + list(args)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, timeout=timeout,
                           input=input.encode() if isinstance(input, str) else (input or b""))
        if ok and p.returncode != 0:
            raise Fail("`kubectl %s` exited %d: %s" % (" ".join(args), p.returncode,
                                                         p.stderr.decode(errors="replace").strip()[-800:]))
        return p

    def json(self, kubeconfig, *args, **kw):
        p = self.run(kubeconfig, *(list(args) + ["-o", "json"]), **kw)
        return json.loads(p.stdout)

    def background(self, kubeconfig, *args):
        cmd = [KUBECTL, "--kubeconfig", kubeconfig, "--cache-dir", self.cache] + list(args)
        return JsonStream(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                           stdin=subprocess.DEVNULL))


class JsonStream:
    """Decodes the concatenated JSON documents a background kubectl prints, as they come."""

    def __init__(self, proc):
        self.proc = proc
        self.docs = []
        self.cv = threading.Condition()
        self.err = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        dec = json.JSONDecoder()
        buf = ""
        while True:
            b = os.read(self.proc.stdout.fileno(), 65536)
            if not b:
                break
            buf += b.decode(errors="replace")
            while True:
                s = buf.lstrip()
                if not s:
                    buf = ""
                    break
                try:
                    doc, end = dec.raw_decode(s)
                except ValueError:
                    buf = s
                    break
                buf = s[end:]
                with self.cv:
                    self.docs.append(doc)
                    self.cv.notify_all()
        with self.cv:
            self.docs.append(None)  # EOF
            self.cv.notify_all()

    def _read_err(self):
        self.err = self.proc.stderr.read()

    def wait(self, pred, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        with self.cv:
            while True:
                if pred([d for d in self.docs if d is not None]):
                    return
                if self.docs and self.docs[-1] is None:
                    raise Fail("kubectl ended before %s; stderr: %s" % (what, self.err.decode(errors="replace")[-500:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Fail("timed out waiting for %s; kubectl printed %d documents" % (what, len(self.docs)))
                self.cv.wait(left)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def pod_manifest(name, labels, port=8000, **meta):
    m = {"name": name, "labels": labels}
    m.update(meta)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m,
            "spec": {"containers": [{"name": "engine", "image": "infera/fake-engine:1",
                                     "ports": [{"name": "http", "containerPort": port}]}]}}


def other_ca(workdir):
    """A second, unrelated CA certificate (for the TLS-verification check)."""
    d = os.path.join(workdir, "other-ca")
    os.makedirs(d, exist_ok=True)
    crt = os.path.join(d, "ca.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", os.path.join(d, "ca.key"), "-out", crt, "-days", "2",
                    "-subj", "/CN=not-the-standin-ca"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30)
    return crt


# ----------------------------------------------------------------------------------------------
# The checks. Each is a function of the context; they run in this order.


class Ctx:
    pass


CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def open_watch_count(ctx, resource="pods"):
    return sum(1 for w in ctx.srv.stats()["watches"] if w["resource"] == resource)


# --- kubectl -----------------------------------------------------------------------------------

@check
def kubectl_version(ctx):
    v = ctx.k.json(ctx.srv.kubeconfig(), "version")
    sv = v.get("serverVersion") or {}
    expect(sv.get("major") == "1" and sv.get("gitVersion", "").startswith("v1."),
           "serverVersion missing or odd: %r" % sv)
    return "server %s, client %s" % (sv.get("gitVersion"), (v.get("clientVersion") or {}).get("gitVersion"))


@check
def kubectl_create_pod(ctx):
    p = ctx.k.run(ctx.srv.kubeconfig(), "create", "-f", os.path.join(TESTDATA, "pod-web.yaml"))
    expect(b"pod/fid-web created" in p.stdout, "unexpected output %r" % p.stdout)
    ctx.k.run(ctx.srv.kubeconfig(), "create", "-f", os.path.join(TESTDATA, "pod-other.yaml"))
    pod = ctx.core.read_namespaced_pod("fid-web", NS)
    expect(pod.metadata.uid and pod.metadata.creation_timestamp and pod.metadata.resource_version.isdigit(),
           "create did not assign uid/creationTimestamp/resourceVersion: %r" % pod.metadata)
    expect(pod.status.phase == "Pending", "phase %r, want Pending" % pod.status.phase)
    expect(pod.metadata.namespace == NS, "namespace %r" % pod.metadata.namespace)
    p = ctx.k.run(ctx.srv.kubeconfig(), "create", "-f", os.path.join(TESTDATA, "pod-web.yaml"), ok=False)
    expect(p.returncode != 0 and b"AlreadyExists" in p.stderr, "second create: rc %d, %r" % (p.returncode, p.stderr))


@check
def kubectl_apply_inferencepool(ctx):
    path = os.path.join(TESTDATA, "inferencepool.yaml")
    p = ctx.k.run(ctx.srv.kubeconfig(), "apply", "-f", path)
    expect(b"created" in p.stdout, "first apply: %r" % p.stdout)
    p = ctx.k.run(ctx.srv.kubeconfig(), "apply", "-f", path)
    expect(b"unchanged" in p.stdout, "second apply: %r" % p.stdout)
    with open(path) as f:
        changed = f.read().replace("number: 8000", "number: 8001")
    p = ctx.k.run(ctx.srv.kubeconfig(), "apply", "-f", "-", input=changed)
    expect(b"configured" in p.stdout, "apply of a change: %r" % p.stdout)
    got = ctx.k.json(ctx.srv.kubeconfig(), "get", "inferencepool", "fid-pool")
    expect(got["spec"]["targetPorts"] == [{"number": 8001}], "targetPorts %r" % got["spec"].get("targetPorts"))
    expect(got["metadata"].get("generation") == 2, "generation %r, want 2" % got["metadata"].get("generation"))
    p = ctx.k.run(ctx.srv.kubeconfig(), "apply", "-f", path)
    expect(b"configured" in p.stdout, "apply back: %r" % p.stdout)


@check
def kubectl_apply_pod_labels(ctx):
    # client-side apply of a built-in kind: a strategic merge patch
    man = pod_manifest("fid-apply", {"app": "applied"})
    ctx.k.run(ctx.srv.kubeconfig(), "apply", "-f", "-", input=json.dumps(man))
    man["metadata"]["labels"]["tier"] = "t1"
    p = ctx.k.run(ctx.srv.kubeconfig(), "apply", "-f", "-", input=json.dumps(man))
    expect(b"configured" in p.stdout, "apply: %r" % p.stdout)
    pod = ctx.core.read_namespaced_pod("fid-apply", NS)
    expect(pod.metadata.labels == {"app": "applied", "tier": "t1"}, "labels %r" % pod.metadata.labels)
    expect(len(pod.spec.containers) == 1 and pod.spec.containers[0].ports[0].container_port == 8000,
           "the containers were not kept by the strategic merge patch: %r" % pod.spec.containers)


@check
def kubectl_label_selector(ctx):
    out = ctx.k.json(ctx.srv.kubeconfig(), "get", "pods", "-l", "app=x")
    names = {i["metadata"]["name"] for i in out["items"]}
    expect("fid-web" in names, "fid-web missing from -l app=x: %r" % names)
    expect("fid-other" not in names, "fid-other (app=other) returned for -l app=x: %r" % names)
    out = ctx.k.json(ctx.srv.kubeconfig(), "get", "pods", "-l", "app in (x,other),app!=x")
    names = {i["metadata"]["name"] for i in out["items"]}
    expect(names == {"fid-other"}, "-l 'app in (x,other),app!=x' gave %r" % names)
    p = ctx.k.run(ctx.srv.kubeconfig(), "get", "pods", "-l", "app in (x", ok=False)
    expect(p.returncode != 0, "a bad selector was accepted")


@check
def kubectl_field_selector(ctx):
    out = ctx.k.json(ctx.srv.kubeconfig(), "get", "pods", "--field-selector", "metadata.name=fid-web")
    names = [i["metadata"]["name"] for i in out["items"]]
    expect(names == ["fid-web"], "--field-selector metadata.name=fid-web gave %r" % names)
    out = ctx.k.json(ctx.srv.kubeconfig(), "get", "pods", "--field-selector",
                     "status.phase=Pending,metadata.name!=fid-web")
    names = {i["metadata"]["name"] for i in out["items"]}
    expect("fid-other" in names and "fid-web" not in names, "status.phase/!= selector gave %r" % names)


@check
def kubectl_get_table(ctx):
    p = ctx.k.run(ctx.srv.kubeconfig(), "get", "pods", "fid-web")
    lines = p.stdout.decode().splitlines()
    expect(len(lines) == 2 and lines[0].split()[:3] == ["NAME", "READY", "STATUS"] and lines[1].startswith("fid-web"),
           "kubectl get pods printed %r" % p.stdout)
    p = ctx.k.run(ctx.srv.kubeconfig(), "get", "inferencepools")
    expect(b"fid-pool" in p.stdout, "kubectl get inferencepools printed %r" % p.stdout)


@check
def kubectl_watch(ctx):
    before = open_watch_count(ctx)
    w = ctx.k.background(ctx.srv.kubeconfig(), "get", "pods", "-w", "--watch-only", "--output-watch-events",
                         "-o", "json")
    try:
        wait_for(lambda: open_watch_count(ctx) > before, 15, "kubectl's watch to be open")
        ctx.k.run(ctx.srv.kubeconfig(), "create", "-f", "-", input=json.dumps(pod_manifest("fid-watched", {"app": "w"})))
        ctx.k.run(ctx.srv.kubeconfig(), "label", "pod", "fid-watched", "phase=two")
        ctx.k.run(ctx.srv.kubeconfig(), "delete", "pod", "fid-watched")

        def seen(docs):
            return [d.get("type") for d in docs
                    if isinstance(d, dict) and (d.get("object") or {}).get("metadata", {}).get("name") == "fid-watched"]
        w.wait(lambda docs: "DELETED" in seen(docs), 15, "kubectl -w to print the DELETED event")
        with w.cv:
            types = seen([d for d in w.docs if d is not None])
    finally:
        w.stop()
    expect(types[:2] == ["ADDED", "MODIFIED"] and types[-1] == "DELETED",
           "kubectl -w printed %r, want ADDED, MODIFIED, ..., DELETED" % types)
    return " ".join(types)


def _watch_one_pod(ctx, name, rv):
    """A python watch on one pod (fieldSelector) from rv, in a thread: returns (events list, thread)."""
    events = []

    def run():
        w = kwatch.Watch()
        for ev in w.stream(ctx.core.list_namespaced_pod, NS, field_selector="metadata.name=" + name,
                           resource_version=rv, timeout_seconds=20, _request_timeout=30):
            events.append((ev["type"], ev["raw_object"]))
            if ev["type"] == "DELETED":
                w.stop()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return events, t


@check
def kubectl_delete_graceful(ctx):
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    ctx.core.create_namespaced_pod(NS, pod_manifest("fid-grace", {"app": "g"}))
    events, t = _watch_one_pod(ctx, "fid-grace", rv)
    t0 = time.monotonic()
    ctx.k.run(ctx.srv.kubeconfig(), "delete", "pod", "fid-grace")  # waits until it is gone
    took = time.monotonic() - t0
    t.join(15)
    types = [e[0] for e in events]
    expect(types[:1] == ["ADDED"] and types[-1:] == ["DELETED"], "watch saw %r, want ADDED, ..., DELETED" % types)
    term = [o for ty, o in events if ty == "MODIFIED" and o["metadata"].get("deletionTimestamp")]
    expect(term and term[0]["metadata"].get("deletionGracePeriodSeconds") == 30,
           "no MODIFIED event with deletionTimestamp/deletionGracePeriodSeconds=30 before DELETED: %r" % types)
    expect(0.5 <= took, "graceful delete returned after %.2f s; --max-grace-s is 1" % took)
    return "terminating, then gone after %.2f s" % took


@check
def kubectl_delete_force(ctx):
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    ctx.core.create_namespaced_pod(NS, pod_manifest("fid-force", {"app": "f"}))
    events, t = _watch_one_pod(ctx, "fid-force", rv)
    ctx.k.run(ctx.srv.kubeconfig(), "delete", "pod", "fid-force", "--grace-period=0", "--force")
    t.join(15)
    types = [e[0] for e in events]
    expect(types == ["ADDED", "DELETED"], "watch saw %r, want ADDED, DELETED (no terminating phase)" % types)
    p = ctx.k.run(ctx.srv.kubeconfig(), "get", "pod", "fid-force", ok=False)
    expect(p.returncode != 0 and b"NotFound" in p.stderr, "the pod is still there: %r" % p.stderr)


@check
def kubectl_kubeconfig_files(ctx):
    out = ctx.k.json(ctx.srv.kubeconfig("-files"), "get", "pods", "-l", "app=x")
    expect([i["metadata"]["name"] for i in out["items"]] == ["fid-web"], "got %r" % out["items"])
    with open(ctx.srv.kubeconfig("-files")) as f:
        text = f.read()
    expect("tokenFile: " + os.path.join(ctx.srv.dir, "token") in text and "certificate-authority: /" in text,
           "kubeconfig-files does not name the files:\n" + text)


@check
def kubectl_kubeconfig_cert(ctx):
    with open(ctx.srv.kubeconfig("-cert")) as f:
        text = f.read()
    expect("token" not in text and "client-certificate-data" in text, "kubeconfig-cert:\n" + text)
    out = ctx.k.json(ctx.srv.kubeconfig("-cert"), "get", "pods", "-l", "app=x")
    expect([i["metadata"]["name"] for i in out["items"]] == ["fid-web"], "got %r" % out["items"])


@check
def kubectl_unauthorized(ctx):
    with open(ctx.srv.kubeconfig()) as f:
        text = f.read()
    tok = ctx.srv.token()
    bad = os.path.join(ctx.tmp, "kubeconfig-wrong-token")
    with open(bad, "w") as f:
        f.write(text.replace("token: " + tok, "token: not-the-token"))
    p = ctx.k.run(bad, "get", "pods", ok=False)
    expect(p.returncode != 0 and b"Unauthorized" in p.stderr, "wrong token: rc %d, stderr %r" % (p.returncode, p.stderr))
    # no credentials at all (kubectl would prompt for a password, so this one is raw HTTP)
    for path in ("/version", "/api", "/apis", "/api/v1/namespaces/default/pods"):
        st, _, body = ctx.srv.request("GET", path, token=False)
        expect(st == 401 and body.get("reason") == "Unauthorized", "%s without credentials: %d %r" % (path, st, body))


# --- python3-kubernetes ------------------------------------------------------------------------

@check
def py_list_label_selector(ctx):
    lst = ctx.core.list_namespaced_pod(NS, label_selector="app=x")
    names = [p.metadata.name for p in lst.items]
    expect(names == ["fid-web"], "label_selector app=x gave %r" % names)
    expect(lst.metadata.resource_version and lst.metadata.resource_version.isdigit(),
           "list metadata.resourceVersion %r" % lst.metadata.resource_version)
    allns = ctx.core.list_pod_for_all_namespaces(label_selector="app=x")
    expect([p.metadata.name for p in allns.items] == ["fid-web"], "all-namespaces list gave %r" % allns.items)


@check
def py_selector_syntax(ctx):
    ns = "selectors"
    pods = {"s-a": {"app": "a", "tier": "front", "n": "3"}, "s-b": {"app": "b", "tier": "back"},
            "s-c": {"app": "c"}, "s-d": {"tier": "front"}}
    for name, labels in pods.items():
        ctx.core.create_namespaced_pod(ns, pod_manifest(name, labels))
    cases = {"app=a": {"s-a"}, "app==a": {"s-a"}, "app!=a": {"s-b", "s-c", "s-d"}, "tier": {"s-a", "s-b", "s-d"},
             "!tier": {"s-c"}, "app in (a,b)": {"s-a", "s-b"}, "app notin (a)": {"s-b", "s-c", "s-d"},
             "app in (a,b,c),tier=front": {"s-a"}, "tier,!app": {"s-d"}, "n>2": {"s-a"}, "n<3": set(),
             " app = b , tier in ( back ) ": {"s-b"}, "": set(pods)}
    for sel, want in cases.items():
        got = {p.metadata.name for p in ctx.core.list_namespaced_pod(ns, label_selector=sel).items}
        expect(got == want, "label_selector %r gave %r, want %r" % (sel, sorted(got), sorted(want)))
    for bad in ("app in (a", "app=a,", "=a", "app in ()", "app=a b", "bad key!=x", "n>x"):
        try:
            ctx.core.list_namespaced_pod(ns, label_selector=bad)
            raise Fail("bad label selector %r was accepted" % bad)
        except ApiException as e:
            body = json.loads(e.body)
            expect(e.status == 400 and body.get("reason") == "BadRequest" and body.get("kind") == "Status",
                   "bad selector %r: %d %r" % (bad, e.status, e.body))
    fcases = {"metadata.name=s-b": {"s-b"}, "metadata.name==s-b": {"s-b"},
              "metadata.name!=s-b,metadata.namespace=selectors": {"s-a", "s-c", "s-d"},
              "status.phase=Running": set()}
    for sel, want in fcases.items():
        got = {p.metadata.name for p in ctx.core.list_namespaced_pod(ns, field_selector=sel).items}
        expect(got == want, "field_selector %r gave %r, want %r" % (sel, sorted(got), sorted(want)))
    for bad in ("spec.nope=1", "metadata.name"):
        try:
            ctx.core.list_namespaced_pod(ns, field_selector=bad)
            raise Fail("bad field selector %r was accepted" % bad)
        except ApiException as e:
            expect(e.status == 400, "bad field selector %r: %d" % (bad, e.status))
    return "%d label, %d field selectors" % (len(cases), len(fcases))


@check
def py_pagination(ctx):
    ns = "selectors"
    first = ctx.core.list_namespaced_pod(ns, limit=3)
    expect(len(first.items) == 3 and first.metadata._continue, "limit=3 gave %d items, continue %r"
           % (len(first.items), first.metadata._continue))
    expect(first.metadata.remaining_item_count == 1, "remainingItemCount %r" % first.metadata.remaining_item_count)
    # a change between pages does not show: the continued list is the snapshot of the first page's rv
    ctx.core.create_namespaced_pod(ns, pod_manifest("s-e", {"app": "e"}))
    rest = ctx.core.list_namespaced_pod(ns, limit=3, _continue=first.metadata._continue)
    names = [p.metadata.name for p in first.items + rest.items]
    expect(names == ["s-a", "s-b", "s-c", "s-d"], "paged names %r" % names)
    expect(not rest.metadata._continue, "last page has continue %r" % rest.metadata._continue)
    expect(rest.metadata.resource_version == first.metadata.resource_version, "pages have different resourceVersions")


@check
def py_create_and_status(ctx):
    body = pod_manifest("", {"app": "py"}, generateName="py-")
    del body["metadata"]["name"]
    pod = ctx.core.create_namespaced_pod(NS, body)
    name = pod.metadata.name
    expect(name.startswith("py-") and len(name) == 8, "generateName gave %r" % name)
    ctx.py_pod = name
    patched = ctx.core.patch_namespaced_pod_status(name, NS, {"status": {
        "phase": "Running", "podIP": "10.9.0.7", "podIPs": [{"ip": "10.9.0.7"}],
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}})
    expect(int(patched.metadata.resource_version) > int(pod.metadata.resource_version), "status patch kept the rv")
    got = ctx.core.read_namespaced_pod(name, NS)
    conds = {c.type: c.status for c in got.status.conditions or []}
    expect(got.status.pod_ip == "10.9.0.7" and got.status.phase == "Running" and conds.get("Ready") == "True",
           "read back: podIP %r phase %r conditions %r" % (got.status.pod_ip, got.status.phase, conds))
    # strategic merge: one condition changes, the other stays (merge key "type")
    ctx.core.patch_namespaced_pod_status(name, NS, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    conds = {c.type: c.status for c in ctx.core.read_namespaced_pod_status(name, NS).status.conditions}
    expect(conds == {"Ready": "False", "ContainersReady": "True"}, "conditions after merge %r" % conds)
    # the main resource ignores status, the status subresource ignores the rest (as the real server)
    ctx.core.patch_namespaced_pod(name, NS, {"status": {"podIP": "1.1.1.1"}, "metadata": {"labels": {"x": "y"}}})
    got = ctx.core.read_namespaced_pod(name, NS)
    expect(got.status.pod_ip == "10.9.0.7" and got.metadata.labels.get("x") == "y",
           "main-resource patch: podIP %r labels %r" % (got.status.pod_ip, got.metadata.labels))
    # replace with a stale resourceVersion: 409 Conflict
    try:
        ctx.core.replace_namespaced_pod(name, NS, pod)  # pod: as created, so its resourceVersion is stale
        raise Fail("a PUT with a stale resourceVersion was accepted")
    except ApiException as e:
        expect(e.status == 409 and json.loads(e.body).get("reason") == "Conflict", "stale PUT: %d %r" % (e.status, e.body))
    fresh = ctx.core.read_namespaced_pod(name, NS)
    fresh.metadata.labels["replaced"] = "yes"
    expect(ctx.core.replace_namespaced_pod(name, NS, fresh).metadata.labels.get("replaced") == "yes", "PUT lost a label")
    # a JSON patch
    ctx.core.patch_namespaced_pod(name, NS, [{"op": "add", "path": "/metadata/labels/jp", "value": "1"}])
    expect(ctx.core.read_namespaced_pod(name, NS).metadata.labels.get("jp") == "1", "JSON patch not applied")


@check
def py_watch_order(ctx):
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    ctx.core.create_namespaced_pod("elsewhere", pod_manifest("fid-order", {"app": "order"}))  # not for this watch
    ctx.core.create_namespaced_pod(NS, pod_manifest("fid-order", {"app": "order"}))
    ctx.core.patch_namespaced_pod("fid-order", NS, {"metadata": {"labels": {"step": "2"}}})
    ctx.core.delete_namespaced_pod("fid-order", NS, grace_period_seconds=0)
    got = []
    w = kwatch.Watch()
    for ev in w.stream(ctx.core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=10,
                       _request_timeout=20):
        md = ev["raw_object"]["metadata"]
        expect(md.get("namespace") == NS, "a watch of namespace %s got %s/%s" % (NS, md.get("namespace"), md.get("name")))
        if md.get("name") == "fid-order":
            got.append((ev["type"], int(md["resourceVersion"])))
            if ev["type"] == "DELETED":
                w.stop()
    types = [t for t, _ in got]
    expect(types == ["ADDED", "MODIFIED", "DELETED"], "events %r" % got)
    rvs = [r for _, r in got]
    expect(rvs == sorted(rvs) and len(set(rvs)) == 3 and rvs[0] > int(rv), "resourceVersions %r" % rvs)
    # absent resourceVersion: synthetic ADDED for the current objects first
    initial = []
    for ev in w.stream(ctx.core.list_namespaced_pod, NS, label_selector="app=x", timeout_seconds=2,
                       _request_timeout=20):
        initial.append((ev["type"], ev["raw_object"]["metadata"]["name"]))
        w.stop()
    expect(initial == [("ADDED", "fid-web")], "watch without resourceVersion began with %r" % initial)


@check
def py_watch_selector_transition(ctx):
    ctx.core.create_namespaced_pod(NS, pod_manifest("fid-trans", {"app": "trans", "pool": "in"}))
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    ctx.core.patch_namespaced_pod("fid-trans", NS, {"metadata": {"labels": {"pool": "out"}}})
    ctx.core.patch_namespaced_pod("fid-trans", NS, {"metadata": {"labels": {"pool": "in"}}})
    ctx.core.delete_namespaced_pod("fid-trans", NS, grace_period_seconds=0)
    got = []
    w = kwatch.Watch()
    for ev in w.stream(ctx.core.list_namespaced_pod, NS, label_selector="pool=in", resource_version=rv,
                       timeout_seconds=5, _request_timeout=20):
        got.append((ev["type"], ev["raw_object"]["metadata"]["labels"].get("pool"),
                    ev["raw_object"]["metadata"]["resourceVersion"]))
        if len(got) == 3:
            w.stop()
    expect([g[:2] for g in got] == [("DELETED", "in"), ("ADDED", "in"), ("DELETED", "in")],
           "a pool=in watch saw %r; want DELETED (stopped matching, old object), ADDED, DELETED" % got)
    expect(int(got[0][2]) > int(rv), "the DELETED-on-transition event carries rv %s, not the change's" % got[0][2])


@check
def py_watch_bookmark(ctx):
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    w = kwatch.Watch()
    got = None
    t0 = time.monotonic()
    for ev in w.stream(ctx.core.list_namespaced_pod, NS, resource_version=rv, allow_watch_bookmarks=True,
                       timeout_seconds=10, _request_timeout=20):
        if ev["type"] == "BOOKMARK":
            got = ev["raw_object"]
            w.stop()
    expect(got is not None, "no BOOKMARK within the 10 s watch")
    expect(got.get("kind") == "Pod" and got.get("apiVersion") == "v1" and
           list(got.get("metadata", {})) == ["resourceVersion"] and int(got["metadata"]["resourceVersion"]) >= int(rv),
           "bookmark object %r" % got)
    return "after %.2f s" % (time.monotonic() - t0)


@check
def py_watch_timeout_ends_cleanly(ctx):
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    t0 = time.monotonic()
    resp = ctx.core.list_namespaced_pod(NS, watch=True, resource_version=rv, timeout_seconds=1,
                                        _preload_content=False, _request_timeout=10)
    data = resp.read()  # raises on a stream without its terminating chunk
    took = time.monotonic() - t0
    expect(resp.status == 200 and data == b"", "status %d, body %r" % (resp.status, data[:200]))
    expect(resp.headers.get("Transfer-Encoding") == "chunked", "not chunked: %r" % dict(resp.headers))
    expect(0.8 <= took < 5, "timeoutSeconds=1 ended after %.2f s" % took)


@check
def py_410_expired(ctx):
    old_rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    ctx.core.patch_namespaced_pod("fid-web", NS, {"metadata": {"annotations": {"touched": "1"}}})
    # an open watch gets the ERROR 410 event when the history is forgotten
    result = {}

    def run():
        try:
            for _ in kwatch.Watch().stream(ctx.core.list_namespaced_pod, NS, resource_version=old_rv,
                                           label_selector="app=nothing", timeout_seconds=20, _request_timeout=30):
                pass
            result["ended"] = "without error"
        except ApiException as e:
            result["status"] = e.status
            result["reason"] = e.reason
    before = open_watch_count(ctx)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for(lambda: open_watch_count(ctx) > before, 10, "the python watch to be open")
    ctx.srv.ctl("expire", {})
    t.join(10)
    expect(result.get("status") == 410 and "Expired" in (result.get("reason") or ""),
           "the open watch ended with %r, want ApiException 410 Expired" % result)
    # a new watch from the old resourceVersion: ApiException 410 (the client's view of the ERROR event)
    try:
        for _ in kwatch.Watch().stream(ctx.core.list_namespaced_pod, NS, resource_version=old_rv,
                                       timeout_seconds=5, _request_timeout=20):
            pass
        raise Fail("a watch from an expired resourceVersion did not fail")
    except ApiException as e:
        expect(e.status == 410 and "too old resource version" in (e.reason or ""), "got %d %r" % (e.status, e.reason))
    # the raw ERROR event, as the stand-in sends it
    resp = ctx.core.list_namespaced_pod(NS, watch=True, resource_version=old_rv, _preload_content=False,
                                        _request_timeout=10)
    ev = json.loads(resp.read().decode().splitlines()[0])
    st = ev["object"]
    expect(ev["type"] == "ERROR" and st.get("kind") == "Status" and st.get("code") == 410 and
           st.get("reason") == "Expired" and st.get("message", "").startswith("too old resource version: " + old_rv + " ("),
           "ERROR event %r" % ev)
    # a fresh list gives a resourceVersion that can be watched from
    rv = ctx.core.list_namespaced_pod(NS).metadata.resource_version
    evs = list(kwatch.Watch().stream(ctx.core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=1,
                                     _request_timeout=10))
    expect(evs == [], "a watch from the fresh list's rv yielded %r" % evs)


@check
def py_delete_graceful(ctx):
    pod = ctx.core.delete_namespaced_pod(ctx.py_pod, NS)
    expect(pod.metadata.deletion_timestamp is not None and pod.metadata.deletion_grace_period_seconds == 30,
           "delete returned deletionTimestamp %r grace %r" % (pod.metadata.deletion_timestamp,
                                                              pod.metadata.deletion_grace_period_seconds))

    def gone():
        try:
            ctx.core.read_namespaced_pod(ctx.py_pod, NS)
            return False
        except ApiException as e:
            if e.status != 404:
                raise
            st = json.loads(e.body)
            expect(st.get("kind") == "Status" and st.get("reason") == "NotFound" and st.get("code") == 404 and
                   st.get("details", {}).get("name") == ctx.py_pod, "404 body %r" % st)
            return True
    wait_for(gone, 10, "the terminating pod to be removed (--max-grace-s 1)")
    try:
        ctx.core.delete_namespaced_pod(ctx.py_pod, NS)
        raise Fail("deleting a missing pod succeeded")
    except ApiException as e:
        expect(e.status == 404, "second delete: %d" % e.status)


@check
def py_custom_object(ctx):
    co = kclient.CustomObjectsApi(ctx.api)
    pool = co.get_namespaced_custom_object("inference.networking.k8s.io", "v1", NS, "inferencepools", "fid-pool")
    expect(pool["kind"] == "InferencePool" and pool["apiVersion"] == "inference.networking.k8s.io/v1",
           "kind/apiVersion %r/%r" % (pool.get("kind"), pool.get("apiVersion")))
    expect(pool["spec"]["selector"]["matchLabels"] == {"app": "x"} and pool["spec"]["targetPorts"] == [{"number": 8000}],
           "spec %r" % pool["spec"])
    lst = co.list_namespaced_custom_object("inference.networking.k8s.io", "v1", NS, "inferencepools")
    expect(lst["kind"] == "InferencePoolList" and [i["metadata"]["name"] for i in lst["items"]] == ["fid-pool"],
           "list %r" % lst)
    co.patch_namespaced_custom_object("inference.networking.k8s.io", "v1", NS, "inferencepools", "fid-pool",
                                      {"metadata": {"labels": {"patched": "yes"}}})
    body = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "fid-pool2"},
            "spec": {"selector": {"matchLabels": {"app": "y"}}, "targetPorts": [{"number": 8100}]}}
    co.create_namespaced_custom_object("inference.networking.k8s.io", "v1", NS, "inferencepools", body)
    try:
        co.create_namespaced_custom_object("inference.networking.k8s.io", "v1", NS, "inferencepools",
                                           dict(body, metadata={"name": "bad"}, spec={"selector": {}}))
        raise Fail("an InferencePool without selector/targetPorts was accepted")
    except ApiException as e:
        expect(e.status == 422, "invalid pool: %d" % e.status)
    st = co.delete_namespaced_custom_object("inference.networking.k8s.io", "v1", NS, "inferencepools", "fid-pool2")
    expect(st.get("kind") == "Status" and st.get("status") == "Success", "delete returned %r" % st)


@check
def py_tls_verification(ctx):
    good = kconfig.new_client_from_config(config_file=ctx.srv.kubeconfig())
    c = kclient.Configuration()
    c.host = good.configuration.host
    c.api_key = dict(good.configuration.api_key)
    c.ssl_ca_cert = other_ca(ctx.tmp)
    c.verify_ssl = True
    c.retries = 0
    bad = kclient.ApiClient(c)
    try:
        kclient.CoreV1Api(bad).list_namespaced_pod(NS, _request_timeout=10)
        raise Fail("a client trusting a different CA connected")
    except Fail:
        raise
    except Exception as e:
        expect("CERTIFICATE_VERIFY_FAILED" in str(e) or "SSL" in type(e).__name__ + str(e),
               "failed, but not on verification: %r" % e)
    c.ssl_ca_cert = ctx.srv.ca
    expect(kclient.CoreV1Api(kclient.ApiClient(c)).list_namespaced_pod(NS, _request_timeout=10).items is not None,
           "the same client with the right CA failed")


@check
def py_token_rotation(ctx):
    old = ctx.srv.token()
    ctx.srv.ctl("tokens", {"tokens": ["rotated-token-1", "rotated-token-2"]})
    try:
        _rotated(ctx, old)
    finally:
        ctx.srv.ctl("tokens", {"tokens": [old]})
    st, _, _ = ctx.srv.request("GET", "/version", token="rotated-token-2")
    expect(st == 401, "a replaced token still works: %d" % st)


def _rotated(ctx, old):
    expect(ctx.srv.token() == "rotated-token-1", "DIR/token is %r" % ctx.srv.token())
    st, _, body = ctx.srv.request("GET", "/api/v1/namespaces/default/pods", token=old)
    expect(st == 401 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "Unauthorized", "reason": "Unauthorized", "code": 401},
           "old token: %d %r" % (st, body))
    st, _, _ = ctx.srv.request("GET", "/version", token="rotated-token-2")
    expect(st == 200, "second rotated token: %d" % st)
    # a client built from kubeconfig-files re-reads tokenFile when it builds a client
    files_client = kconfig.new_client_from_config(config_file=ctx.srv.kubeconfig("-files"))
    expect(kclient.CoreV1Api(files_client).list_namespaced_pod(NS).items is not None, "tokenFile client failed")


# --- the stand-in's own edges (raw HTTP) ------------------------------------------------------

@check
def raw_errors(ctx):
    s = ctx.srv
    st, _, b = s.request("GET", "/api/v1/namespaces/default/pods/nope")
    expect(st == 404 and b.get("reason") == "NotFound" and b.get("message") == 'pods "nope" not found' and
           b.get("details") == {"name": "nope", "kind": "pods"}, "404: %r" % b)
    st, _, b = s.request("POST", "/api/v1/namespaces/default/pods", body=b"{not json",
                         headers={"Content-Type": "application/json"})
    expect(st == 400 and b.get("kind") == "Status" and b.get("reason") == "BadRequest", "malformed JSON: %d %r" % (st, b))
    st, _, b = s.request("POST", "/api/v1/namespaces/default/pods", body={"metadata": {"name": "nocontainers"}})
    expect(st == 422 and b.get("reason") == "Invalid", "pod without containers: %d %r" % (st, b))
    st, _, b = s.request("GET", "/api/v1/namespaces/default/pods?labelSelector=" + urllib.parse.quote("a in (b"))
    expect(st == 400 and b.get("reason") == "BadRequest", "bad selector: %d %r" % (st, b))
    st, _, b = s.request("PATCH", "/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools/fid-pool",
                         body=b"{}", headers={"Content-Type": "application/strategic-merge-patch+json"})
    expect(st == 415 and b.get("reason") == "UnsupportedMediaType", "SMP on a custom resource: %d %r" % (st, b))
    # an oversized body: 413 without the server reading (or waiting for) it
    c = s.conn()
    try:
        c.putrequest("POST", "/api/v1/namespaces/default/pods")
        c.putheader("Authorization", "Bearer " + s.token())
        c.putheader("Content-Type", "application/json")
        c.putheader("Content-Length", str(17 * 1024 * 1024))
        c.endheaders()
        r = c.getresponse()
        b = json.loads(r.read())
        expect(r.status == 413 and b.get("code") == 413, "oversized body: %d %r" % (r.status, b))
    finally:
        c.close()
    # keep-alive: several requests on one connection
    c = s.conn()
    try:
        for _ in range(3):
            c.request("GET", "/version", headers={"Authorization": "Bearer " + s.token()})
            r = c.getresponse()
            r.read()
            expect(r.status == 200 and r.version == 11, "keep-alive request: %d HTTP/%s" % (r.status, r.version))
    finally:
        c.close()
    st, _, b = s.request("GET", "/apis")
    expect(st == 200 and b.get("kind") == "APIGroupList" and
           b["groups"][0]["preferredVersion"]["groupVersion"] == "inference.networking.k8s.io/v1", "/apis: %r" % b)
    st, _, b = s.request("GET", "/api/v1")
    pods = [r for r in b["resources"] if r["name"] == "pods"][0]
    expect({"list", "watch", "create", "delete", "get", "patch", "update"} <= set(pods["verbs"]) and
           any(r["name"] == "pods/status" for r in b["resources"]), "/api/v1: %r" % b)


def _raw_watch(ctx, path):
    """Opens a raw watch; returns (connection, response) once the stand-in has registered it."""
    before = open_watch_count(ctx)
    c = ctx.srv.conn(timeout=15)
    c.request("GET", path, headers={"Authorization": "Bearer " + ctx.srv.token()})
    r = c.getresponse()
    expect(r.status == 200, "watch: HTTP %d" % r.status)
    wait_for(lambda: open_watch_count(ctx) > before, 10, "the raw watch to be registered")
    return c, r


@check
def control_inject_and_drop(ctx):
    c, r = _raw_watch(ctx, "/api/v1/namespaces/default/pods?watch=1&labelSelector=app%3Dnothing&resourceVersion="
                      + ctx.core.list_namespaced_pod(NS).metadata.resource_version)
    try:
        n = ctx.srv.ctl("inject", {"line": "{this is not json"})["watches"]
        expect(n >= 1, "inject reached %d watches" % n)
        line = r.readline()
        expect(line == b"{this is not json\n", "injected line arrived as %r" % line)
        ctx.srv.ctl("drop-watches", {})
        try:
            rest = r.read()
            raise Fail("a dropped watch ended cleanly (%r)" % rest)
        except http.client.IncompleteRead:
            pass
        except (ConnectionError, ssl.SSLError, OSError):
            pass
    finally:
        c.close()
    wait_for(lambda: open_watch_count(ctx) == 0, 10, "open_watches to fall to 0 after drop-watches")
    st = ctx.srv.stats()
    expect(st["requests"].get("watch", 0) > 0 and st["requests"].get("list", 0) > 0 and
           st["resourceVersion"].isdigit(), "stats %r" % {k: st[k] for k in ("requests", "resourceVersion")})


@check
def closed_client_watch_is_reaped(ctx):
    c, r = _raw_watch(ctx, "/api/v1/pods?watch=true")
    c.close()
    r.close()
    wait_for(lambda: open_watch_count(ctx) == 0, 10, "the stand-in to notice a watch client went away")


@check
def history_bound_and_token_flag(ctx):
    """A second stand-in: --history 5 keeps five events; --token sets DIR/token."""
    d = os.path.join(ctx.tmp, "second")
    os.makedirs(d)
    srv = StandIn(d, extra=["--history", "5", "--token", "fixed-token"])
    try:
        expect(srv.token() == "fixed-token", "DIR/token is %r, want the --token value" % srv.token())
        api = kconfig.new_client_from_config(config_file=srv.kubeconfig())
        core = kclient.CoreV1Api(api)
        rvs = [core.create_namespaced_pod(NS, pod_manifest("h-%d" % i, {"app": "h"})).metadata.resource_version
               for i in range(8)]
        # rvs[2] is the oldest still watchable: the five events after it are kept
        evs = list(kwatch.Watch().stream(core.list_namespaced_pod, NS, resource_version=rvs[2], timeout_seconds=1,
                                         _request_timeout=10))
        expect([e["raw_object"]["metadata"]["name"] for e in evs] == ["h-3", "h-4", "h-5", "h-6", "h-7"],
               "watch from the oldest kept rv gave %r" % [e["raw_object"]["metadata"]["name"] for e in evs])
        for old in (rvs[0], rvs[1]):
            try:
                list(kwatch.Watch().stream(core.list_namespaced_pod, NS, resource_version=old, timeout_seconds=2,
                                           _request_timeout=10))
                raise Fail("a watch from rv %s, beyond --history 5, did not get 410" % old)
            except ApiException as e:
                expect(e.status == 410, "watch from rv %s: %d" % (old, e.status))
        api.close()
    finally:
        srv.stop()


@check
def bulk_1000_pods(ctx):
    t0 = time.monotonic()
    out = ctx.srv.ctl("pods/bulk", {"namespace": "bulk", "count": 1000, "labels": {"app": "bulk"}, "ready": True,
                                    "ip_prefix": "10.0", "port": 8000})
    t_bulk = time.monotonic() - t0
    expect(out["created"] == 1000, "bulk created %r" % out.get("created"))
    t0 = time.monotonic()
    raw = ctx.core.list_namespaced_pod("bulk", label_selector="app=bulk", _preload_content=False).data
    t_raw = time.monotonic() - t0
    t0 = time.monotonic()
    lst = ctx.core.list_namespaced_pod("bulk", label_selector="app=bulk")
    t_typed = time.monotonic() - t0
    expect(len(lst.items) == 1000 and len(json.loads(raw)["items"]) == 1000, "listed %d" % len(lst.items))
    ips = {p.status.pod_ip for p in lst.items}
    expect(len(ips) == 1000, "only %d distinct pod IPs" % len(ips))
    ready = all(any(c.type == "Ready" and c.status == "True" for c in p.status.conditions) and
                p.status.phase == "Running" and p.spec.containers[0].ports[0].container_port == 8000 for p in lst.items)
    expect(ready, "bulk pods are not all Running, Ready, port 8000")
    expect(t_raw < 1.0, "the stand-in took %.3f s to serve the 1,000-pod list" % t_raw)
    ctx.bulk_rv = lst.metadata.resource_version
    return ("bulk create %.3f s; list of 1000: %.3f s on the wire (%d KiB), %.3f s with python3-kubernetes' "
            "model decoding" % (t_bulk, t_raw, len(raw) // 1024, t_typed))


@check
def restart_keeps_state(ctx):
    def all_pods():
        raw = json.loads(ctx.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=10).data)
        return sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in raw["items"]), raw["metadata"]
    names, meta = all_pods()
    rv = int(meta["resourceVersion"])
    port = ctx.srv.port
    rc = ctx.srv.stop(signal.SIGKILL)  # as a crash: the journal must already hold every change
    expect(rc == -signal.SIGKILL, "kill: rc %r" % rc)
    t0 = time.monotonic()
    ctx.srv = StandIn(ctx.tmp, port=port, log_name="apiserver-2.log")
    t_start = time.monotonic() - t0
    expect(ctx.srv.port == port, "restarted on %d, not %d" % (ctx.srv.port, port))
    ctx.api.rest_client.pool_manager.clear()  # the pooled connections died with the old process
    names2, meta2 = all_pods()
    rv2 = meta2["resourceVersion"]
    expect(names2 == names, "after restart %d pods, before %d" % (len(names2), len(names)))
    expect(int(rv2) >= rv, "resourceVersion went back: %s < %d" % (rv2, rv))
    # the watch resumes from the stored resourceVersion
    pod = ctx.core.create_namespaced_pod(NS, pod_manifest("fid-after-restart", {"app": "r"}))
    expect(int(pod.metadata.resource_version) > rv, "new rv %s not above %d" % (pod.metadata.resource_version, rv))
    evs = []
    w = kwatch.Watch()
    for ev in w.stream(ctx.core.list_namespaced_pod, NS, resource_version=rv2,
                       timeout_seconds=5, _request_timeout=20):
        evs.append((ev["type"], ev["raw_object"]["metadata"]["name"]))
        w.stop()
    expect(evs == [("ADDED", "fid-after-restart")], "watch from the restored rv gave %r" % evs)
    out = ctx.k.json(ctx.srv.kubeconfig(), "get", "pods", "-l", "app=x")
    expect([i["metadata"]["name"] for i in out["items"]] == ["fid-web"], "kubectl after restart: %r" % out["items"])
    return "%d pods kept, resourceVersion %d -> %s, restart took %.2f s" % (
        len(names2), rv, rv2, t_start)


@check
def sigterm_exits_0(ctx):
    rc = ctx.srv.stop(signal.SIGTERM)
    expect(rc == 0, "exit code %r after SIGTERM" % rc)
    ctx.srv = None


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="run only the checks whose name contains this (plus their setup)")
    ap.add_argument("-v", action="store_true", help="keep the temporary directory and print where it is")
    args = ap.parse_args()
    if not shutil.which(KUBECTL):
        print("FAIL setup: kubectl (%s) not found" % KUBECTL)
        print("0 passed, 1 failed")
        return 1
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="k8s-fidelity-")
    ctx = Ctx()
    ctx.tmp = tmp
    passed = failed = 0
    try:
        try:
            ctx.srv = StandIn(tmp)
        except Fail as e:
            print("FAIL start the stand-in: %s" % e)
            print("0 passed, 1 failed")
            return 1
        ctx.k = Kubectl(tmp)
        ctx.api = kconfig.new_client_from_config(config_file=ctx.srv.kubeconfig())
        ctx.core = kclient.CoreV1Api(ctx.api)
        print("stand-in on port %d; kubectl %s; python3-kubernetes %s; dir %s"
              % (ctx.srv.port, KUBECTL, kubernetes.__version__, tmp), flush=True)
        for fn in CHECKS:
            if args.k and args.k not in fn.__name__ and not fn.__name__.startswith(("kubectl_create", "kubectl_apply_inf", "py_create")):
                continue
            t0 = time.monotonic()
            try:
                note = fn(ctx)
                passed += 1
                print("PASS %-32s %6.2f s%s" % (fn.__name__, time.monotonic() - t0, ("  " + note) if note else ""),
                      flush=True)
            except Exception as e:
                failed += 1
                detail = str(e) if isinstance(e, (Fail, ApiException)) else "".join(
                    traceback.format_exception(type(e), e, e.__traceback__))[-1500:]
                print("FAIL %-32s %6.2f s  %s" % (fn.__name__, time.monotonic() - t0, detail), flush=True)
                if ctx.srv is None or ctx.srv.proc.poll() is not None:
                    print("     (the stand-in is not running; see %s)" % tmp, flush=True)
                    break
    finally:
        if getattr(ctx, "srv", None) is not None and ctx.srv.proc.poll() is None:
            try:
                ctx.srv.stop()
            except Fail:
                pass
        if failed or args.v:
            print("kept %s (stand-in logs: apiserver*.log)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("k8s stand-in fidelity: %.1f s" % (time.monotonic() - t_start))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
