#!/usr/bin/python3
"""A small stand-in for the Kubernetes API server: the subset infera's pod discovery uses.

Python 3 standard library only (plus the `openssl` CLI, to make the test PKI once).

Usage:

    /usr/bin/python3 tests/support/k8s/apiserver.py --dir DIR [--port 0] [--token TOKEN]
        [--bookmark-interval-s 1.0] [--history 1000] [--state-file FILE] [--max-grace-s 1.0]
        [--verbose]

On start it makes, in DIR (the PKI only if absent, so a restart on the same DIR keeps its CA):

    ca.crt ca.key            a test CA
    server.crt server.key    signed by it, SAN IP:127.0.0.1 and DNS:localhost
    client.crt client.key    CN=infera-test, signed by the CA (client-certificate auth)
    token                    the accepted bearer token (--token, else the one already there, else random)
    namespace                "default" (so DIR can stand in for a service-account directory)
    kubeconfig               certificate-authority-data + user token
    kubeconfig-files         certificate-authority: <path> + user tokenFile: <path of DIR/token>
    kubeconfig-cert          certificate-authority-data + client-certificate-data/client-key-data
    port                     the port it listens on (server https://127.0.0.1:PORT)

then prints exactly one line `{"port": N}` on stdout once it listens, and serves HTTPS (HTTP/1.1,
keep-alive, one thread per connection) until SIGTERM or SIGINT, when it exits 0.

Served: /version, /api, /api/v1, /apis, /apis/inference.networking.k8s.io[/v1] (discovery);
/openapi/v3 and /openapi/v2 (minimal documents: kubectl 1.32 then asks for server-side field
validation, kubectl 1.20 skips client-side validation, so neither needs --validate=false); pods (namespaced and all-namespaces list/watch; get, create, replace, merge /
strategic-merge / JSON patch, delete with grace periods, deletecollection, the status subresource);
inferencepools of inference.networking.k8s.io/v1 (the same verbs); namespaces (get/list, synthetic:
every namespace exists). Every /api, /apis, /version request needs `Authorization: Bearer <token>`
(DIR/token is re-read on each request) or a client certificate signed by the CA, else a 401 Status.

Control endpoints (same listener, no auth, JSON):
    POST /_standin/expire           forget all history: older resourceVersions get 410; open watches
                                    get an ERROR 410 event and end
    POST /_standin/inject           {"line": "..."}: that raw line (plus newline) into every pod watch
    POST /_standin/drop-watches     close every open watch connection abruptly (no final chunk)
    POST /_standin/tokens           {"tokens": ["a", "b"]}: the accepted bearer tokens (DIR/token := a)
    POST /_standin/pods/bulk        {"namespace", "count", "labels", "ready", "ip_prefix", "port",
                                    "name_prefix", "annotations"}: N Running pods with distinct IPs
    GET  /_standin/stats            {"open_watches", "watches", "requests", "resourceVersion", "objects"}
    POST /_standin/stats/reset      zero the request counters

--state-file FILE keeps the objects and the resourceVersion counter across restarts (an append-only
journal, compacted now and then), like etcd behind a real API server; watch history is not kept
across a restart (as a restarted API server's watch cache), so a watch from the stored
resourceVersion works and one from an older resourceVersion gets 410.

See README.md beside this file for what is and is not implemented.
"""

import argparse
import base64
import bisect
import collections
import heapq
import json
import os
import queue
import random
import re
import secrets
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 16 * 1024 * 1024
IDLE_TIMEOUT_S = 120
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def now_rfc3339(offset_s=0.0):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset_s))


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ----------------------------------------------------------------------------------------------
# Errors as Kubernetes Status objects


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, close=False):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.close = close

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message, "reason": self.reason}
        if self.details:
            st["details"] = self.details
        st["code"] = self.code
        return st


def _details(res, name):
    d = {"name": name}
    if res.group:
        d["group"] = res.group
    d["kind"] = res.name
    return d


def not_found(res, name):
    qual = res.name if not res.group else "%s.%s" % (res.name, res.group)
    return ApiError(404, "NotFound", '%s "%s" not found' % (qual, name), _details(res, name))


def already_exists(res, name):
    qual = res.name if not res.group else "%s.%s" % (res.name, res.group)
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qual, name),
                    _details(res, name))


def conflict(res, name, why=None):
    qual = res.name if not res.group else "%s.%s" % (res.name, res.group)
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (qual, name, why),
                    _details(res, name))


def invalid(res, name, causes):
    """causes: list of (field, message)."""
    msg = '%s "%s" is invalid: %s' % (res.kind, name, ", ".join("%s: %s" % c for c in causes))
    d = _details(res, name)
    d["kind"] = res.kind
    d["causes"] = [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]
    return ApiError(422, "Invalid", msg, d)


def bad_request(msg):
    return ApiError(400, "BadRequest", msg)


# ----------------------------------------------------------------------------------------------
# Resources


class Resource:
    def __init__(self, name, singular, kind, group, version, short_names, graceful, typed_list,
                 field_labels, categories=()):
        self.name = name
        self.singular = singular
        self.kind = kind
        self.group = group
        self.version = version
        self.api_version = version if not group else "%s/%s" % (group, version)
        self.short_names = list(short_names)
        self.graceful = graceful          # pods: graceful deletion with deletionTimestamp
        self.typed_list = typed_list      # built-in: list items carry no kind/apiVersion
        self.field_labels = field_labels  # field selector label -> getter
        self.categories = list(categories)
        self.prefix = b'{"kind":"%s","apiVersion":"%s",' % (kind.encode(), self.api_version.encode())


def _get(obj, *path):
    for p in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(p)
    return obj


def _str(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


META_FIELDS = {
    "metadata.name": lambda o: _str(_get(o, "metadata", "name")),
    "metadata.namespace": lambda o: _str(_get(o, "metadata", "namespace")),
}
POD_FIELDS = dict(META_FIELDS)
POD_FIELDS.update({
    "spec.nodeName": lambda o: _str(_get(o, "spec", "nodeName")),
    "spec.restartPolicy": lambda o: _str(_get(o, "spec", "restartPolicy")),
    "spec.schedulerName": lambda o: _str(_get(o, "spec", "schedulerName")),
    "spec.serviceAccountName": lambda o: _str(_get(o, "spec", "serviceAccountName")),
    "spec.hostNetwork": lambda o: _str(bool(_get(o, "spec", "hostNetwork"))),
    "status.phase": lambda o: _str(_get(o, "status", "phase")),
    "status.podIP": lambda o: _str(_get(o, "status", "podIP")),
    "status.nominatedNodeName": lambda o: _str(_get(o, "status", "nominatedNodeName")),
})

PODS = Resource("pods", "pod", "Pod", "", "v1", ["po"], True, True, POD_FIELDS, ["all"])
POOLS = Resource("inferencepools", "inferencepool", "InferencePool", "inference.networking.k8s.io",
                 "v1", ["infpool"], False, False, META_FIELDS)
RESOURCES = {r.name: r for r in (PODS, POOLS)}


# ----------------------------------------------------------------------------------------------
# Selectors

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def label_key_error(key):
    if "/" in key:
        prefix, name = key.split("/", 1)
        if not prefix or len(prefix) > 253 or not _DNS1123_SUB.match(prefix):
            return "prefix part must be a DNS-1123 subdomain"
    else:
        name = key
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character")
    return None


def label_value_error(v):
    if v == "":
        return None
    if len(v) > 63 or not _LABEL_NAME.match(v):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', "
                "'_' or '.', and must start and end with an alphanumeric character")
    return None


_SEL_SPECIAL = "!=(),<>"


def _sel_tokens(s):
    toks = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
        elif s.startswith("!=", i) or s.startswith("==", i):
            toks.append(s[i:i + 2])
            i += 2
        elif c in _SEL_SPECIAL:
            toks.append(c)
            i += 1
        else:
            j = i
            while j < n and not s[j].isspace() and s[j] not in _SEL_SPECIAL:
                j += 1
            word = s[i:j]
            toks.append(("KW", word) if word in ("in", "notin") else ("ID", word))
            i = j
    return toks


def parse_label_selector(s):
    """Returns a list of (key, op, values); raises ApiError 400 on a bad selector."""
    def fail(why):
        raise bad_request("unable to parse requirement: %s" % why)

    toks = _sel_tokens(s)
    reqs = []
    i = 0

    def peek():
        return toks[i] if i < len(toks) else None

    if not toks:
        return reqs
    while True:
        t = peek()
        if t == "!":
            i += 1
            t = peek()
            if not isinstance(t, tuple):
                fail("found '%s', expected: identifier after '!'" % t)
            key, op, vals = t[1], "!", []
            i += 1
        elif isinstance(t, tuple):
            key = t[1]
            i += 1
            t = peek()
            if t is None or t == ",":
                op, vals = "exists", []
            elif t in ("=", "==", "!=", "<", ">"):
                op = {"==": "="}.get(t, t)
                i += 1
                t = peek()
                if isinstance(t, tuple):
                    vals = [t[1]]
                    i += 1
                elif t is None or t == ",":
                    vals = [""]
                else:
                    fail("found '%s', expected: identifier" % (t[1] if isinstance(t, tuple) else t))
            elif isinstance(t, tuple) and t[0] == "KW":
                op = t[1]
                i += 1
                if peek() != "(":
                    fail("found '%s', expected: '('" % (peek() if not isinstance(peek(), tuple) else peek()[1]))
                i += 1
                vals = []
                while True:
                    t = peek()
                    if t == ")":
                        i += 1
                        break
                    if isinstance(t, tuple):
                        vals.append(t[1])
                        i += 1
                        t = peek()
                        if t == ",":
                            i += 1
                            if peek() == ")":
                                vals.append("")
                            continue
                        if t == ")":
                            continue
                        fail("found '%s', expected: ',' or ')'" % (t[1] if isinstance(t, tuple) else t))
                    elif t == ",":
                        vals.append("")
                        i += 1
                    else:
                        fail("found '%s', expected: ',', ')' or identifier" % (t[1] if isinstance(t, tuple) else t))
                if not vals:
                    fail("for 'in', 'notin' operators, values set can't be empty")
            else:
                fail("found '%s', expected: '=', '!=', '==', 'in', notin'" % (t[1] if isinstance(t, tuple) else t))
        else:
            fail("found '%s', expected: !, identifier, or 'end of string'" % (t[1] if isinstance(t, tuple) else t))
        err = label_key_error(key)
        if err:
            fail('Invalid value: "%s": %s' % (key, err))
        for v in vals:
            if op in ("<", ">"):
                try:
                    int(v)
                except ValueError:
                    fail('for \'Gt\', \'Lt\' operators, the value must be an integer: "%s"' % v)
            else:
                err = label_value_error(v)
                if err:
                    fail('Invalid value: "%s": %s' % (v, err))
        reqs.append((key, op, vals))
        t = peek()
        if t is None:
            break
        if t != ",":
            fail("found '%s', expected: ',' or 'end of string'" % (t[1] if isinstance(t, tuple) else t))
        i += 1
        if peek() is None:
            fail("found '', expected: identifier")
    return reqs


def labels_match(reqs, labels):
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "exists":
            ok = has
        elif op == "!":
            ok = not has
        elif op == "=" or op == "in":
            ok = has and v in vals
        elif op == "!=" or op == "notin":
            ok = (not has) or v not in vals
        else:  # < >
            try:
                lv = int(v) if has else None
            except (TypeError, ValueError):
                lv = None
            if lv is None:
                ok = False
            else:
                ok = lv < int(vals[0]) if op == "<" else lv > int(vals[0])
        if not ok:
            return False
    return True


def _split_unescaped(s, sep):
    parts, cur, i = [], [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape_field(v):
    out, i = [], 0
    while i < len(v):
        if v[i] == "\\" and i + 1 < len(v):
            if v[i + 1] not in "\\,=":
                raise bad_request("invalid field selector: invalid escape sequence: \\%s" % v[i + 1])
            out.append(v[i + 1])
            i += 2
        else:
            if v[i] in ",=":
                raise bad_request("invalid field selector: unescaped %s in value" % v[i])
            out.append(v[i])
            i += 1
    return "".join(out)


def parse_field_selector(s, res):
    reqs = []
    if not s.strip():
        return reqs
    for term in _split_unescaped(s, ","):
        idx = next((i for i, c in enumerate(term) if c in "!="), -1)
        if idx <= 0:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (s, term))
        if term[idx] == "!":
            if term[idx:idx + 2] != "!=":
                raise bad_request("invalid selector: '%s'; can't understand '%s'" % (s, term))
            op = "!="
        elif term[idx:idx + 2] == "==":
            op = "=="
        else:
            op = "="
        key = term[:idx].strip()
        val = _unescape_field(term[idx + len(op):])
        if key not in res.field_labels:
            raise bad_request('field label not supported: %s' % key)
        reqs.append((res.field_labels[key], op != "!=", val))
    return reqs


def fields_match(reqs, obj):
    for getter, eq, val in reqs:
        if (getter(obj) == val) != eq:
            return False
    return True


class Selector:
    def __init__(self, res, label_sel, field_sel):
        self.label_src = label_sel or ""
        self.field_src = field_sel or ""
        self.labels = parse_label_selector(self.label_src)
        self.fields = parse_field_selector(self.field_src, res)
        self.empty = not self.labels and not self.fields

    def match(self, obj):
        if self.empty:
            return True
        return labels_match(self.labels, _get(obj, "metadata", "labels")) and fields_match(self.fields, obj)


# ----------------------------------------------------------------------------------------------
# Patches

SMP_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "ports": "containerPort", "env": "name", "volumeMounts": "mountPath", "volumes": "name",
    "volumeDevices": "devicePath", "conditions": "type", "imagePullSecrets": "name",
    "hostAliases": "ip", "podIPs": "ip", "hostIPs": "ip", "ownerReferences": "uid",
    "resourceClaims": "name", "readinessGates": "conditionType", "topologySpreadConstraints": "topologyKey",
}
SMP_PRIMITIVE_MERGE = {"finalizers"}


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _smp_strip(v):
    if isinstance(v, dict):
        return {k: _smp_strip(x) for k, x in v.items() if not k.startswith("$")}
    if isinstance(v, list):
        return [_smp_strip(x) for x in v if not (isinstance(x, dict) and x.get("$patch") == "delete")]
    return v


def strategic_merge_patch(target, patch):
    """Strategic merge patch, for the pod fields infera and kubectl touch: lists with a known merge
    key are merged by it, `$patch` (replace/delete/merge), `$retainKeys`,
    `$deleteFromPrimitiveList/...` and `$setElementOrder/...` are understood; other lists replace."""
    if not isinstance(patch, dict):
        return _smp_strip(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _smp_strip(patch)
    if directive == "delete":
        return None
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(out.get(field), list) and isinstance(v, list):
                out[field] = [x for x in out[field] if x not in v]
            continue
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            if v.get("$patch") == "delete":
                out.pop(k, None)
            else:
                merged = strategic_merge_patch(out.get(k), v)
                if merged is None:
                    out.pop(k, None)
                else:
                    out[k] = merged
        elif isinstance(v, list):
            out[k] = _smp_list(k, out.get(k), v)
        else:
            out[k] = v
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: x for k, x in out.items() if k in retain}
    return out


def _smp_list(field, cur, patch_list):
    if any(isinstance(x, dict) and x.get("$patch") == "replace" and len(x) == 1 for x in patch_list):
        return [_smp_strip(x) for x in patch_list if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    if not isinstance(cur, list):
        cur = []
    if field in SMP_PRIMITIVE_MERGE:
        out = list(cur)
        for x in patch_list:
            if x not in out:
                out.append(x)
        return out
    key = SMP_MERGE_KEYS.get(field)
    if not key or not all(isinstance(x, dict) for x in patch_list):
        return _smp_strip(patch_list)
    out = [dict(x) if isinstance(x, dict) else x for x in cur]
    for p in patch_list:
        kv = p.get(key)
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == kv), None)
        if p.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_smp_strip(p))
        else:
            merged = strategic_merge_patch(out[idx], p)
            if merged is None:
                out.pop(idx)
            else:
                out[idx] = merged
    return out


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _ptr_get(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise ValueError("path not found: %s" % p)
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[int(p)]
        else:
            raise ValueError("path not found: %s" % p)
    return cur


def _ptr_parent(doc, parts):
    return _ptr_get(doc, parts[:-1])


def json_patch(doc, ops):
    """RFC 6902 JSON patch (doc is modified in place and returned)."""
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be a list of operations")
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise ValueError("invalid JSON patch operation %r" % (op,))
        kind = op["op"]
        parts = _ptr(op.get("path", ""))
        if kind in ("move", "copy"):
            val = json.loads(json.dumps(_ptr_get(doc, _ptr(op.get("from", "")))))
            if kind == "move":
                json_patch(doc, [{"op": "remove", "path": op["from"]}])
            kind = "add"
            op = {"op": "add", "path": op["path"], "value": val}
        if kind == "test":
            if _ptr_get(doc, parts) != op.get("value"):
                raise ValueError("test operation failed at %s" % op.get("path"))
            continue
        if not parts:
            if kind in ("add", "replace"):
                doc = op.get("value")
                continue
            raise ValueError("cannot remove the document root")
        parent = _ptr_parent(doc, parts)
        last = parts[-1]
        if kind == "add":
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op.get("value"))
                else:
                    idx = int(last)
                    if idx < 0 or idx > len(parent):
                        raise ValueError("index out of range: %s" % last)
                    parent.insert(idx, op.get("value"))
            elif isinstance(parent, dict):
                parent[last] = op.get("value")
            else:
                raise ValueError("path not found: %s" % op.get("path"))
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            elif isinstance(parent, dict) and last in parent:
                del parent[last]
            else:
                raise ValueError("path not found: %s" % op.get("path"))
        elif kind == "replace":
            if isinstance(parent, list):
                parent[int(last)] = op.get("value")
            elif isinstance(parent, dict) and last in parent:
                parent[last] = op.get("value")
            else:
                raise ValueError("path not found: %s" % op.get("path"))
        else:
            raise ValueError("unknown JSON patch operation %r" % kind)
    return doc


# ----------------------------------------------------------------------------------------------
# The store: objects, the resourceVersion counter, the event history, the watchers


class Entry:
    """One stored object version: the dict (never mutated once stored) and its JSON forms."""
    __slots__ = ("obj", "item", "full")

    def __init__(self, res, obj):
        self.obj = obj
        if res.typed_list:
            body = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            self.item = dumps(body)
            self.full = res.prefix + self.item[1:] if len(self.item) > 2 else res.prefix[:-1] + b"}"
        else:
            self.full = dumps(obj)
            self.item = self.full

    def copy(self):
        return json.loads(self.full)


class Event:
    __slots__ = ("rv", "res", "type", "new", "old", "_line")

    def __init__(self, rv, res, etype, new, old):
        self.rv = rv
        self.res = res
        self.type = etype    # ADDED / MODIFIED / DELETED
        self.new = new       # Entry (for DELETED: the object as deleted, at the deletion's rv)
        self.old = old       # Entry or None
        self._line = None

    def line(self):
        if self._line is None:
            self._line = b'{"type":"%s","object":%s}\n' % (self.type.encode(), self.new.full)
        return self._line


class Watcher:
    def __init__(self, res, namespace, selector, params):
        self.res = res
        self.namespace = namespace
        self.selector = selector
        self.params = params
        self.q = queue.Queue()
        self.cursor = 0       # the resourceVersion this watcher is up to date with (for bookmarks)
        self.start_rv = 0
        self.id = next(_watcher_ids)
        self.started = time.time()

    def matches(self, obj):
        if self.namespace is not None and _get(obj, "metadata", "namespace") != self.namespace:
            return False
        return self.selector.match(obj)

    def describe(self):
        d = {"id": self.id, "resource": self.res.name, "namespace": self.namespace,
             "labelSelector": self.selector.label_src, "fieldSelector": self.selector.field_src,
             "resourceVersion": str(self.cursor)}
        d.update(self.params)
        return d


_watcher_ids = iter(range(1, 1 << 62))


class Store:
    def __init__(self, history, state_file, max_grace_s):
        self.lock = threading.RLock()
        self.rv = 0
        self.floor = 0             # every rv >= floor can be watched from
        self.history = max(1, history)
        self.events = collections.deque()
        self.objs = {r.name: {} for r in RESOURCES.values()}
        self.watchers = set()
        self.max_grace_s = max_grace_s
        self.state_file = state_file
        self.journal = None
        self.journal_lines = 0
        self.reap_heap = []
        self.reap_cv = threading.Condition(self.lock)
        if state_file:
            self._load()
            self._compact()
        self.floor = self.rv
        threading.Thread(target=self._reaper, name="reaper", daemon=True).start()

    # -- persistence ---------------------------------------------------------------------------
    def _load(self):
        try:
            with open(self.state_file, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                break  # a torn last line (killed mid-write)
            if "snapshot" in rec:
                self.objs = {r: {} for r in RESOURCES}
                for rname, items in rec["snapshot"].items():
                    res = RESOURCES.get(rname)
                    if res:
                        for o in items:
                            self.objs[rname][(o["metadata"].get("namespace", ""), o["metadata"]["name"])] = Entry(res, o)
            elif rec.get("op") == "put":
                res = RESOURCES[rec["res"]]
                o = rec["obj"]
                self.objs[res.name][(o["metadata"].get("namespace", ""), o["metadata"]["name"])] = Entry(res, o)
            elif rec.get("op") == "del":
                self.objs.get(rec["res"], {}).pop(tuple(rec["key"]), None)
            self.rv = max(self.rv, int(rec.get("rv", 0)))
        # Pods that were terminating when the server stopped finish terminating now.
        for rname, objs in self.objs.items():
            for key, e in objs.items():
                if _get(e.obj, "metadata", "deletionTimestamp"):
                    heapq.heappush(self.reap_heap, (time.monotonic() + min(0.1, self.max_grace_s),
                                                    rname, key, e.obj["metadata"].get("uid")))

    def _compact(self):
        if not self.state_file:
            return
        if self.journal:
            self.journal.close()
        tmp = self.state_file + ".tmp"
        snap = {r: [e.obj for _, e in sorted(objs.items())] for r, objs in self.objs.items()}
        with open(tmp, "wb") as f:
            f.write(dumps({"snapshot": snap, "rv": self.rv}) + b"\n")
        os.replace(tmp, self.state_file)
        self.journal = open(self.state_file, "ab")
        self.journal_lines = 0

    def _journal(self, rec, flush=True):
        if not self.journal:
            return
        self.journal.write(dumps(rec) + b"\n")
        self.journal_lines += 1
        if flush:
            self._journal_flush()

    def _journal_flush(self):
        if not self.journal:
            return
        n = sum(len(o) for o in self.objs.values())
        if self.journal_lines > 2 * n + 1000:
            self._compact()
        else:
            self.journal.flush()

    def close(self):
        with self.lock:
            if self.journal:
                self.journal.flush()
                self.journal.close()
                self.journal = None

    # -- mutation (call with the lock held) ----------------------------------------------------
    def _commit(self, res, key, obj, etype, flush=True):
        """Stores obj (a fresh dict) as the new version of key; returns its Entry."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        old = self.objs[res.name].get(key)
        e = Entry(res, obj)
        self.objs[res.name][key] = e
        self._event(Event(self.rv, res, etype, e, old))
        self._journal({"rv": self.rv, "op": "put", "res": res.name, "obj": obj}, flush)
        return e

    def _remove(self, res, key, flush=True):
        old = self.objs[res.name].pop(key)
        self.rv += 1
        gone = old.copy()
        gone["metadata"]["resourceVersion"] = str(self.rv)
        e = Entry(res, gone)
        self._event(Event(self.rv, res, "DELETED", e, old))
        self._journal({"rv": self.rv, "op": "del", "res": res.name, "key": list(key)}, flush)
        return e

    def _event(self, ev):
        self.events.append(ev)
        while len(self.events) > self.history:
            self.floor = self.events.popleft().rv
        for w in self.watchers:
            if w.res is ev.res:
                w.q.put(ev)

    # -- reads ---------------------------------------------------------------------------------
    def snapshot_at(self, res, rv):
        """The objects of res as they were at rv (rewinding the history), or None if too old."""
        with self.lock:
            if rv < self.floor or rv > self.rv:
                return None
            state = dict(self.objs[res.name])
            for ev in reversed(self.events):
                if ev.rv <= rv:
                    break
                if ev.res is not res:
                    continue
                o = ev.new.obj["metadata"]
                key = (o.get("namespace", ""), o["name"])
                if ev.type == "ADDED":
                    state.pop(key, None)
                else:
                    state[key] = ev.old
            return state

    # -- watches -------------------------------------------------------------------------------
    def open_watch(self, w, rv_param, send_initial):
        """Registers w; returns (initial entries, backlog events) or raises _Expired."""
        with self.lock:
            initial, backlog = [], []
            if send_initial or rv_param in ("", "0"):
                initial = [e for _, e in sorted(self.objs[w.res.name].items()) if w.matches(e.obj)]
            else:
                try:
                    r = int(rv_param)
                    if r < 0:
                        raise ValueError
                except ValueError:
                    raise bad_request('invalid resource version: "%s"' % rv_param)
                if r < self.floor:
                    raise _Expired(r, self.floor)
                for ev in reversed(self.events):
                    if ev.rv <= r:
                        break
                    if ev.res is w.res:
                        backlog.append(ev)
                backlog.reverse()
                w.cursor = r
            # every event after start_rv reaches w.q; the initial objects / backlog cover the rest
            w.start_rv = max(self.rv, w.cursor)
            self.watchers.add(w)
            return initial, backlog

    def close_watch(self, w):
        with self.lock:
            self.watchers.discard(w)

    def broadcast(self, item, res=None):
        with self.lock:
            n = 0
            for w in self.watchers:
                if res is None or w.res is res:
                    w.q.put(item)
                    n += 1
            return n

    def expire(self):
        with self.lock:
            self.rv += 1
            self.floor = self.rv
            self.events.clear()
            self._journal({"rv": self.rv, "op": "bump"})
            n = self.broadcast(("expire", self.floor))
            return n

    # -- graceful deletion ---------------------------------------------------------------------
    def schedule_removal(self, res, key, uid, delay_s):
        with self.lock:
            heapq.heappush(self.reap_heap, (time.monotonic() + delay_s, res.name, key, uid))
            self.reap_cv.notify()

    def _reaper(self):
        with self.lock:
            while True:
                now = time.monotonic()
                while self.reap_heap and self.reap_heap[0][0] <= now:
                    _, rname, key, uid = heapq.heappop(self.reap_heap)
                    e = self.objs[rname].get(key)
                    if e is None or e.obj["metadata"].get("uid") != uid:
                        continue
                    if not e.obj["metadata"].get("deletionTimestamp"):
                        continue
                    if e.obj["metadata"].get("finalizers"):
                        continue  # removed when the last finalizer goes (see maybe_finish_deletion)
                    self._remove(RESOURCES[rname], key)
                timeout = self.reap_heap[0][0] - now if self.reap_heap else None
                self.reap_cv.wait(timeout)


class _Expired(Exception):
    def __init__(self, rv, floor):
        super().__init__("too old resource version: %d (%d)" % (rv, floor))
        self.rv = rv
        self.floor = floor


def expired_status(msg):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": msg, "reason": "Expired", "code": 410}


# ----------------------------------------------------------------------------------------------
# Object semantics (defaults, validation, create / update / delete)

GEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def pod_defaults(obj):
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not isinstance(c, dict):
            continue
        c.setdefault("resources", {})
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        img = c.get("image") or ""
        c.setdefault("imagePullPolicy", "Always" if (img.endswith(":latest") or ":" not in img.rsplit("/", 1)[-1]) else "IfNotPresent")
        for p in c.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
    st = obj.get("status")
    if not isinstance(st, dict):
        st = obj["status"] = {}
    st.setdefault("phase", "Pending")
    st.setdefault("qosClass", "BestEffort")


def validate(res, obj, name):
    causes = []
    md = obj.get("metadata")
    for field in ("labels", "annotations"):
        v = md.get(field)
        if v is None:
            continue
        if not isinstance(v, dict):
            causes.append(("metadata." + field, "Invalid value: must be a map of strings"))
            continue
        for k, x in v.items():
            if not isinstance(x, str):
                causes.append(("metadata.%s" % field, 'Invalid value: "%s": value must be a string' % k))
                continue
            err = label_key_error(k)
            if err:
                causes.append(("metadata.%s" % field, 'Invalid value: "%s": %s' % (k, err)))
            if field == "labels":
                err = label_value_error(x)
                if err:
                    causes.append(("metadata.labels", 'Invalid value: "%s": %s' % (x, err)))
    if res is PODS:
        spec = obj.get("spec")
        cs = spec.get("containers") if isinstance(spec, dict) else None
        if not isinstance(cs, list) or not cs:
            causes.append(("spec.containers", "Required value"))
        else:
            for i, c in enumerate(cs):
                if not isinstance(c, dict) or not c.get("name"):
                    causes.append(("spec.containers[%d].name" % i, "Required value"))
                elif not c.get("image"):
                    causes.append(("spec.containers[%d].image" % i, "Required value"))
    elif res is POOLS:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            causes.append(("spec", "Required value"))
        else:
            sel = spec.get("selector")
            if not isinstance(sel, dict) or not isinstance(sel.get("matchLabels"), dict) or not sel["matchLabels"]:
                causes.append(("spec.selector.matchLabels", "Required value"))
            tp = spec.get("targetPorts")
            if not isinstance(tp, list) or not (1 <= len(tp) <= 8):
                causes.append(("spec.targetPorts", "Required value: between 1 and 8 items"))
            else:
                for i, p in enumerate(tp):
                    n = p.get("number") if isinstance(p, dict) else None
                    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 65535:
                        causes.append(("spec.targetPorts[%d].number" % i,
                                       "Invalid value: must be an integer between 1 and 65535"))
    if causes:
        raise invalid(res, name, causes)


def check_name(res, name):
    if not name:
        raise invalid(res, "", [("metadata.name", "Required value: name or generateName is required")])
    if len(name) > 253 or not _DNS1123_SUB.match(name):
        raise invalid(res, name, [("metadata.name", 'Invalid value: "%s": a lowercase RFC 1123 subdomain '
                                   "must consist of lower case alphanumeric characters, '-' or '.', and "
                                   "must start and end with an alphanumeric character" % name)])


def check_body_object(res, obj, namespace):
    if not isinstance(obj, dict):
        raise bad_request("the body of the request must be a JSON object")
    kind = obj.get("kind")
    if kind not in (None, "", res.kind):
        raise bad_request("the kind of the provided object (%s) does not match %s" % (kind, res.kind))
    av = obj.get("apiVersion")
    if av not in (None, "", res.api_version):
        raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                          % (av, res.api_version))
    md = obj.get("metadata")
    if md is None:
        md = obj["metadata"] = {}
    if not isinstance(md, dict):
        raise bad_request("metadata must be an object")
    ns = md.get("namespace")
    if ns and namespace and ns != namespace:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")


def _ns_check(ns):
    if not ns or len(ns) > 63 or not _DNS1123_LABEL.match(ns):
        raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns, {"name": ns, "kind": "namespaces"})


class Api:
    """The operations, on top of the store."""

    def __init__(self, store):
        self.store = store

    def create(self, res, ns, obj):
        check_body_object(res, obj, ns)
        _ns_check(ns)
        md = obj["metadata"]
        st = self.store
        with st.lock:
            if not md.get("name") and md.get("generateName"):
                for _ in range(20):
                    cand = md["generateName"] + "".join(random.choice(GEN_ALPHABET) for _ in range(5))
                    if (ns, cand) not in st.objs[res.name]:
                        break
                md["name"] = cand
            name = md.get("name") or ""
            check_name(res, name)
            if md.get("resourceVersion"):
                raise ApiError(500, "InternalError", "resourceVersion should not be set on objects to be created")
            key = (ns, name)
            if key in st.objs[res.name]:
                raise already_exists(res, name)
            obj["kind"] = res.kind
            obj["apiVersion"] = res.api_version
            md["namespace"] = ns
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_rfc3339()
            for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
                md.pop(f, None)
            if res is PODS:
                pod_defaults(obj)
            else:
                md["generation"] = 1
            validate(res, obj, name)
            obj = _ordered(res, obj)
            return st._commit(res, key, obj, "ADDED")

    def get(self, res, ns, name):
        e = self.store.objs[res.name].get((ns, name))
        if e is None:
            raise not_found(res, name)
        return e

    def update(self, res, ns, name, mutate, subresource=None, body_rv=None):
        """mutate(copy_of_current) -> new object. Applies the API server's update rules."""
        st = self.store
        with st.lock:
            cur = st.objs[res.name].get((ns, name))
            if cur is None:
                raise not_found(res, name)
            new = mutate(cur.copy())
            check_body_object(res, new, ns)
            md = new["metadata"]
            if md.get("name") not in (None, name):
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                  % (md.get("name"), name))
            old = cur.obj
            om = old["metadata"]
            rv = md.get("resourceVersion") if body_rv is None else body_rv
            if rv not in (None, "") and str(rv) != om["resourceVersion"]:
                raise conflict(res, name)
            if subresource == "status":
                n = json.loads(cur.full)
                n["status"] = new.get("status") if new.get("status") is not None else {}
                new = n
            else:
                new["status"] = json.loads(json.dumps(old.get("status"))) if "status" in old else None
                if new["status"] is None:
                    new.pop("status")
                md = new["metadata"]
                for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation"):
                    if f in om:
                        md[f] = om[f]
                    else:
                        md.pop(f, None)
                md["name"] = name
                md["namespace"] = ns
                md.pop("managedFields", None)
                if res is PODS:
                    pod_defaults(new)
                elif new.get("spec") != old.get("spec"):
                    md["generation"] = int(om.get("generation", 1)) + 1
            new["kind"] = res.kind
            new["apiVersion"] = res.api_version
            new["metadata"]["resourceVersion"] = om["resourceVersion"]
            validate(res, new, name)
            new = _ordered(res, new)
            if new == old:
                return cur  # a no-op update: no new resourceVersion, no event (as the real server)
            e = st._commit(res, (ns, name), new, "MODIFIED")
            if om.get("deletionTimestamp") and not new["metadata"].get("finalizers") and old["metadata"].get("finalizers"):
                # the last finalizer went: finish the deletion now
                st._remove(res, (ns, name))
            return e

    def delete(self, res, ns, name, opts):
        st = self.store
        with st.lock:
            cur = st.objs[res.name].get((ns, name))
            if cur is None:
                raise not_found(res, name)
            om = cur.obj["metadata"]
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != om.get("uid"):
                raise conflict(res, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (pre["uid"], om.get("uid")))
            if pre.get("resourceVersion") and pre["resourceVersion"] != om.get("resourceVersion"):
                raise conflict(res, name, "Precondition failed: ResourceVersion in precondition: %s, "
                               "ResourceVersion in object meta: %s" % (pre["resourceVersion"], om.get("resourceVersion")))
            grace = opts.get("gracePeriodSeconds")
            if res.graceful:
                if grace is None:
                    grace = _get(cur.obj, "spec", "terminationGracePeriodSeconds")
                    grace = 30 if grace is None else grace
                grace = max(0, int(grace))
            else:
                grace = 0
            finalizers = om.get("finalizers")
            if om.get("deletionTimestamp"):
                # already terminating: only a shorter grace period changes anything
                if grace == 0 and not finalizers:
                    st._remove(res, (ns, name))
                elif grace < int(om.get("deletionGracePeriodSeconds") or 0):
                    new = cur.copy()
                    new["metadata"]["deletionTimestamp"] = now_rfc3339(grace)
                    new["metadata"]["deletionGracePeriodSeconds"] = grace
                    cur = st._commit(res, (ns, name), new, "MODIFIED")
                    st.schedule_removal(res, (ns, name), om.get("uid"), min(grace, st.max_grace_s))
                return cur, False
            if grace == 0 and not finalizers:
                gone = st._remove(res, (ns, name))
                return gone, True
            new = cur.copy()
            new["metadata"]["deletionTimestamp"] = now_rfc3339(grace)
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            e = st._commit(res, (ns, name), _ordered(res, new), "MODIFIED")
            if not finalizers:
                st.schedule_removal(res, (ns, name), om.get("uid"), min(grace, st.max_grace_s))
            return e, False


_META_ORDER = ["name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
               "annotations", "ownerReferences", "finalizers", "managedFields"]


def _ordered(res, obj):
    """Key order as the real server writes them (kind, apiVersion, metadata, spec, status)."""
    md = obj.get("metadata") or {}
    md2 = {k: md[k] for k in _META_ORDER if k in md}
    md2.update({k: v for k, v in md.items() if k not in md2})
    out = {"kind": res.kind, "apiVersion": res.api_version, "metadata": md2}
    if not res.typed_list:
        out = {"apiVersion": res.api_version, "kind": res.kind, "metadata": md2}
    for k in ("spec", "status"):
        if k in obj:
            out[k] = obj[k]
    for k, v in obj.items():
        if k not in out:
            out[k] = v
    return out


# ----------------------------------------------------------------------------------------------
# Discovery documents

def api_resource(res, status=False):
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    if status:
        return {"name": res.name + "/status", "singularName": "", "namespaced": True, "kind": res.kind,
                "verbs": ["get", "patch", "update"]}
    d = {"name": res.name, "singularName": res.singular, "namespaced": True, "kind": res.kind,
         "verbs": verbs}
    if res.short_names:
        d["shortNames"] = res.short_names
    if res.categories:
        d["categories"] = res.categories
    return d


def discovery_core():
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
         "verbs": ["get", "list"], "shortNames": ["ns"]},
        api_resource(PODS), api_resource(PODS, True)]}


def discovery_group_version():
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": POOLS.api_version,
            "resources": [api_resource(POOLS), api_resource(POOLS, True)]}


def api_group():
    gv = {"groupVersion": POOLS.api_version, "version": POOLS.version}
    return {"name": POOLS.group, "versions": [gv], "preferredVersion": gv}


def _pb_field(num, payload):
    """A protobuf length-delimited field (payload < 128 bytes)."""
    assert len(payload) < 128
    return bytes([(num << 3) | 2, len(payload)]) + payload


def openapi_v2_protobuf():
    """gnostic openapi_v2.Document{swagger: "2.0", info: {title, version}, paths: {}, definitions: {}}."""
    info = _pb_field(1, b"Kubernetes") + _pb_field(2, SERVER_VERSION["gitVersion"].encode())
    return _pb_field(1, b"2.0") + _pb_field(2, info) + _pb_field(8, b"") + _pb_field(9, b"")


def _openapi_op(res, verb, sub=""):
    params = []
    if verb in ("post", "put", "patch"):
        params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                  {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                  {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
    action = {"post": "post", "put": "put", "patch": "patch", "get": "get", "delete": "delete"}[verb]
    return {"operationId": "%s%s%s" % (verb, res.kind, sub), "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": res.group, "version": res.version, "kind": res.kind}}


def openapi_v3_doc(res):
    base = "/api/v1" if not res.group else "/apis/" + res.api_version
    coll = base + "/namespaces/{namespace}/" + res.name
    schema_name = ("io.k8s.api.core.v1." if not res.group else "io.k8s.networking.inference.v1.") + res.kind
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": {
            coll: {"get": _openapi_op(res, "get"), "post": _openapi_op(res, "post")},
            coll + "/{name}": {"get": _openapi_op(res, "get"), "put": _openapi_op(res, "put"),
                               "patch": _openapi_op(res, "patch"), "delete": _openapi_op(res, "delete")},
            coll + "/{name}/status": {"get": _openapi_op(res, "get", "Status"),
                                      "put": _openapi_op(res, "put", "Status"),
                                      "patch": _openapi_op(res, "patch", "Status")},
        },
        "components": {"schemas": {schema_name: {
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": res.group, "version": res.version, "kind": res.kind}],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": {"type": "object"},
                           "status": {"type": "object"}}}}},
    }


# ----------------------------------------------------------------------------------------------
# HTTP


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()

    def inc(self, what):
        with self.lock:
            self.counts[what] += 1

    def snapshot(self):
        with self.lock:
            return dict(self.counts)

    def reset(self):
        with self.lock:
            self.counts.clear()


class _Drop(Exception):
    pass


def _accepts_table(accept):
    return "as=Table" in (accept or "")


def _age(ts):
    try:
        t = time.mktime(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    except (TypeError, ValueError):
        return "<unknown>"
    s = max(0, int(time.time() - t))
    if s < 120:
        return "%ds" % s
    if s < 7200:
        return "%dm" % (s // 60)
    if s < 172800:
        return "%dh" % (s // 3600)
    return "%dd" % (s // 86400)


def table_for(res, entries, list_meta, include_object="Metadata"):
    if res is PODS:
        cols = [("Name", "string", "name"), ("Ready", "string", ""), ("Status", "string", ""),
                ("Restarts", "string", ""), ("Age", "string", ""), ("IP", "string", "wide"),
                ("Node", "string", "wide")]
    else:
        cols = [("Name", "string", "name"), ("Age", "date", "")]
    defs = []
    for i, (name, typ, fmt) in enumerate(cols):
        d = {"name": name, "type": typ, "format": "name" if fmt == "name" else "",
             "description": name, "priority": 1 if fmt == "wide" else 0}
        defs.append(d)
    rows = []
    for e in entries:
        o = e.obj
        md = o["metadata"]
        if res is PODS:
            st = o.get("status") or {}
            cs = st.get("containerStatuses") or []
            total = len(_get(o, "spec", "containers") or [])
            ready = sum(1 for c in cs if c.get("ready"))
            if not cs:
                ready = total if any(c.get("type") == "Ready" and c.get("status") == "True"
                                     for c in st.get("conditions") or []) else 0
            phase = st.get("phase") or ""
            if md.get("deletionTimestamp"):
                phase = "Terminating"
            cells = [md["name"], "%d/%d" % (ready, total), phase,
                     str(sum(int(c.get("restartCount", 0)) for c in cs)), _age(md.get("creationTimestamp")),
                     st.get("podIP") or "<none>", _get(o, "spec", "nodeName") or "<none>"]
        else:
            cells = [md["name"], _age(md.get("creationTimestamp"))]
        if include_object == "Object":
            obj = o
        elif include_object == "None":
            obj = None
        else:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}
        row = {"cells": cells}
        if obj is not None:
            row["object"] = obj
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": defs, "rows": rows}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "infera-k8s-standin"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("standin: %s %s\n" % (self.address_string(), fmt % args))

    def log_request(self, code="-", size="-"):
        if self.server.verbose:
            BaseHTTPRequestHandler.log_request(self, code, size)

    def version_string(self):
        return self.server_version

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (a malformed request line, bad headers): a Status, then close."""
        self.close_connection = True
        reasons = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 408: "Timeout",
                   413: "RequestEntityTooLarge", 414: "RequestURITooLong", 431: "BadRequest",
                   501: "MethodNotAllowed", 505: "BadRequest"}
        err = ApiError(code, reasons.get(code, "BadRequest"), message or explain or "bad request")
        try:
            if not getattr(self, "request_version", None) or self.request_version == "HTTP/0.9":
                self.request_version = "HTTP/1.1"
            self.send_json(code, err.status())
        except OSError:
            pass

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_HEAD(self):
        self._dispatch("HEAD")

    # -- responses -----------------------------------------------------------------------------
    def send_bytes(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        # headers and body in one write (one TLS record, no Nagle/delayed-ACK stall)
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def send_json(self, code, obj):
        self.send_bytes(code, dumps(obj))

    def send_error_status(self, err):
        if err.close:
            self.close_connection = True
        self.send_json(err.code, err.status())

    # -- request plumbing ----------------------------------------------------------------------
    def _read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise _Drop()
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise bad_request("malformed chunked request body")
                if size == 0:
                    while True:
                        trailer = self.rfile.readline(8192)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    break
                total += size
                if total > MAX_BODY:
                    raise ApiError(413, "RequestEntityTooLarge", "the request body is too large (limit %d bytes)"
                                   % MAX_BODY, close=True)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(8)
            return b"".join(chunks)
        cl = self.headers.get("Content-Length")
        if not cl:
            return b""
        try:
            n = int(cl)
            if n < 0:
                raise ValueError
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid Content-Length", close=True)
        if n > MAX_BODY:
            raise ApiError(413, "RequestEntityTooLarge", "the request body is too large (limit %d bytes)"
                           % MAX_BODY, close=True)
        data = self.rfile.read(n)
        if len(data) != n:
            raise _Drop()
        return data

    def _json_body(self, required=True):
        if not self.body.strip():
            if required:
                raise bad_request("the request body is empty")
            return None
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise bad_request("the body of the request could not be decoded as JSON: %s" % e)

    def _dispatch(self, method):
        self.body = b""
        try:
            try:
                if method in ("POST", "PUT", "PATCH", "DELETE"):
                    self.body = self._read_body()
                self._route(method)
            except ApiError as e:
                self.send_error_status(e)
        except _Drop:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout, ssl.SSLError):
            self.close_connection = True
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            try:
                self.send_json(500, ApiError(500, "InternalError", "internal error in the stand-in").status())
            except Exception:
                pass

    def _authenticated(self):
        h = self.headers.get("Authorization") or ""
        if h[:7].lower() == "bearer ":
            if h[7:].strip() in self.server.accepted_tokens():
                return True
        try:
            cert = self.connection.getpeercert()
        except (ValueError, AttributeError):
            cert = None
        return bool(cert)

    def _route(self, method):
        u = urllib.parse.urlsplit(self.path)
        path = u.path.rstrip("/") or "/"
        q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query, keep_blank_values=True).items()}
        self.query = q
        srv = self.server
        if path.startswith("/_standin/"):
            srv.stats.inc("control")
            return self._control(method, path)
        if path in ("/healthz", "/livez", "/readyz"):
            return self.send_bytes(200, b"ok", "text/plain; charset=utf-8")
        if not self._authenticated():
            srv.stats.inc("unauthorized")
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if method not in ("GET", "HEAD") and path in ("/version", "/api", "/api/v1", "/apis") :
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if path == "/version":
            srv.stats.inc("discovery")
            return self.send_json(200, SERVER_VERSION)
        if path == "/api":
            srv.stats.inc("discovery")
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                        "serverAddress": "127.0.0.1:%d" % srv.port}]})
        if path == "/api/v1":
            srv.stats.inc("discovery")
            return self.send_json(200, discovery_core())
        if path == "/apis":
            srv.stats.inc("discovery")
            g = api_group()
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g]})
        if path == "/apis/" + POOLS.group:
            srv.stats.inc("discovery")
            return self.send_json(200, {"kind": "APIGroup", "apiVersion": "v1", **api_group()})
        if path == "/apis/" + POOLS.api_version:
            srv.stats.inc("discovery")
            return self.send_json(200, discovery_group_version())
        if path == "/openapi/v2":
            # Empty (no definitions): kubectl then skips client-side schema validation and uses its
            # compiled-in types for strategic merge patches. kubectl <= 1.22 asks for protobuf.
            srv.stats.inc("openapi")
            if "protobuf" in (self.headers.get("Accept") or ""):
                return self.send_bytes(200, openapi_v2_protobuf(),
                                       "application/octet-stream")
            return self.send_json(200, {"swagger": "2.0", "info": {"title": "Kubernetes",
                                                                   "version": SERVER_VERSION["gitVersion"]},
                                        "paths": {}, "definitions": {}})
        if path == "/openapi/v3":
            srv.stats.inc("openapi")
            return self.send_json(200, {"paths": {
                "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=standin1"},
                "apis/" + POOLS.api_version: {"serverRelativeURL": "/openapi/v3/apis/%s?hash=standin1" % POOLS.api_version},
            }})
        if path == "/openapi/v3/api/v1":
            srv.stats.inc("openapi")
            return self.send_json(200, openapi_v3_doc(PODS))
        if path == "/openapi/v3/apis/" + POOLS.api_version:
            srv.stats.inc("openapi")
            return self.send_json(200, openapi_v3_doc(POOLS))
        parts = path.strip("/").split("/")
        # /api/v1/... or /apis/G/V/...
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
            group_res = {"pods": PODS, "namespaces": None}
        elif parts[:3] == ["apis", POOLS.group, POOLS.version]:
            rest = parts[3:]
            group_res = {"inferencepools": POOLS}
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rest and rest[0] == "watch":  # the deprecated /watch/ paths
            rest = rest[1:]
            q["watch"] = "true"
        ns = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) >= 3:
            ns = urllib.parse.unquote(rest[1])
            rest = rest[2:]
        elif rest and rest[0] == "namespaces" and "namespaces" in group_res:
            return self._namespaces(method, rest[1:])
        if not rest or rest[0] not in group_res or group_res[rest[0]] is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = group_res[rest[0]]
        name = urllib.parse.unquote(rest[1]) if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else None
        if len(rest) > 3 or (sub is not None and sub != "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            return self._collection(method, res, ns)
        if ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self._object(method, res, ns, name, sub)

    def _namespaces(self, method, rest):
        srv = self.server
        if method not in ("GET", "HEAD"):
            raise ApiError(405, "MethodNotAllowed", "the stand-in does not allow this method on namespaces")
        def ns_obj(n):
            return {"kind": "Namespace", "apiVersion": "v1",
                    "metadata": {"name": n, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, n + ".standin")),
                                 "resourceVersion": "1", "creationTimestamp": srv.started_at,
                                 "labels": {"kubernetes.io/metadata.name": n}},
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        if rest:
            srv.stats.inc("get")
            n = urllib.parse.unquote(rest[0])
            if len(rest) > 1:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            try:
                _ns_check(n)
            except ApiError:
                raise
            return self.send_json(200, ns_obj(n))
        srv.stats.inc("list")
        with srv.store.lock:
            names = {"default", "kube-system", "kube-public", "kube-node-lease"}
            for objs in srv.store.objs.values():
                names.update(k[0] for k in objs)
            rv = srv.store.rv
        items = [ns_obj(n) for n in sorted(names)]
        for it in items:
            del it["kind"], it["apiVersion"]
        return self.send_json(200, {"kind": "NamespaceList", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": str(rv)}, "items": items})

    # -- collections: list, watch, create, deletecollection ------------------------------------
    def _collection(self, method, res, ns):
        q = self.query
        srv = self.server
        if method in ("GET", "HEAD"):
            if q.get("watch") in ("1", "true", "True"):
                srv.stats.inc("watch")
                return self._watch(res, ns)
            srv.stats.inc("list")
            return self._list(res, ns)
        if method == "POST":
            srv.stats.inc("create")
            if ns is None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            self._check_content_type(res, ("application/json",))
            obj = self._json_body()
            e = srv.api.create(res, ns, obj)
            return self.send_bytes(201, e.full)
        if method == "DELETE":
            srv.stats.inc("deletecollection")
            if ns is None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            sel = Selector(res, q.get("labelSelector"), q.get("fieldSelector"))
            opts = self._delete_options()
            out = []
            with srv.store.lock:
                keys = [k for k, e in sorted(srv.store.objs[res.name].items()) if k[0] == ns and sel.match(e.obj)]
                for k in keys:
                    try:
                        e, _ = srv.api.delete(res, ns, k[1], opts)
                        out.append(e)
                    except ApiError:
                        pass
                rv = srv.store.rv
            return self._send_list(res, out, {"resourceVersion": str(rv)})
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _list(self, res, ns):
        q = self.query
        srv = self.server
        st = srv.store
        sel = Selector(res, q.get("labelSelector"), q.get("fieldSelector"))
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise bad_request('invalid limit: "%s"' % q.get("limit"))
        cont = q.get("continue") or ""
        start_after = None
        with st.lock:
            if cont:
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont + "=" * (-len(cont) % 4)))
                    snap_rv = int(tok["rv"])
                    start_after = tuple(tok["start"])
                except (ValueError, KeyError, TypeError):
                    raise bad_request("continue key is not valid: incorrect encoded start resourceVersion")
                state = st.snapshot_at(res, snap_rv)
                if state is None:
                    raise ApiError(410, "Expired",
                                   "The provided continue parameter is too old to display a consistent list result. "
                                   "You can start a new list without the continue parameter, or use the continue "
                                   "token in this response to retrieve the remainder of the results. Continuing "
                                   "with the provided token results in an inconsistent list - objects that were "
                                   "created, modified, or deleted between the time the first chunk was returned "
                                   "and now may show up in the list.")
            else:
                snap_rv = st.rv
                state = None
                rvp = q.get("resourceVersion") or ""
                if rvp not in ("", "0") and q.get("resourceVersionMatch") == "Exact":
                    try:
                        state = st.snapshot_at(res, int(rvp))
                        snap_rv = int(rvp) if state is not None else snap_rv
                    except ValueError:
                        raise bad_request('invalid resource version: "%s"' % rvp)
                if state is None:
                    state = st.objs[res.name]
                state = dict(state)
        keys = sorted(k for k in state if ns is None or k[0] == ns)
        if start_after is not None:
            keys = keys[bisect.bisect_right(keys, start_after):]
        items = []
        more = False
        last = None
        for i, k in enumerate(keys):
            e = state[k]
            if not sel.match(e.obj):
                continue
            if limit and len(items) >= limit:
                more = True
                break
            items.append(e)
            last = k
        meta = {"resourceVersion": str(snap_rv)}
        if more:
            meta["continue"] = base64.urlsafe_b64encode(dumps({"v": "meta.k8s.io/v1", "rv": snap_rv,
                                                                 "start": list(last)})).decode().rstrip("=")
            if sel.empty:
                remaining = len(keys) - (keys.index(last) + 1)
                meta["remainingItemCount"] = remaining
        return self._send_list(res, items, meta)

    def _send_list(self, res, entries, meta):
        if _accepts_table(self.headers.get("Accept")):
            return self.send_json(200, table_for(res, entries, meta, self.query.get("includeObject", "Metadata")))
        head = b'{"kind":"%sList","apiVersion":"%s","metadata":%s,"items":[' % (
            res.kind.encode(), res.api_version.encode(), dumps(meta))
        body = head + b",".join(e.item for e in entries) + b"]}"
        return self.send_bytes(200, body)

    # -- watch ---------------------------------------------------------------------------------
    def _watch(self, res, ns):
        q = self.query
        srv = self.server
        st = srv.store
        sel = Selector(res, q.get("labelSelector"), q.get("fieldSelector"))
        try:
            timeout_s = float(q.get("timeoutSeconds") or 0)
        except ValueError:
            raise bad_request('invalid timeoutSeconds: "%s"' % q.get("timeoutSeconds"))
        if timeout_s <= 0:  # as the real server: unset means a random 30 to 60 minutes
            timeout_s = random.uniform(1800, 3600)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        send_initial = q.get("sendInitialEvents") in ("1", "true", "True")
        rvp = q.get("resourceVersion") or ""
        if send_initial and (q.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise invalid(res, "", [("resourceVersionMatch", "Forbidden: sendInitialEvents requires "
                                     "setting resourceVersionMatch to NotOlderThan and allowWatchBookmarks")])
        table = _accepts_table(self.headers.get("Accept"))
        w = Watcher(res, ns, sel, {"allowWatchBookmarks": bookmarks, "timeoutSeconds": q.get("timeoutSeconds")})
        expired = None
        try:
            initial, backlog = st.open_watch(w, rvp, send_initial)
        except _Expired as e:
            expired = str(e)
            initial, backlog = [], []
        sock = self.connection
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

            def obj_bytes(entry, raw=None):
                if table:
                    o = raw if raw is not None else entry.obj
                    return dumps(table_for(res, [Entry(res, o)] if raw is not None else [entry], {},
                                           q.get("includeObject", "Metadata")))
                return entry.full if raw is None else dumps(raw)

            def event(etype, entry, raw=None):
                chunk(b'{"type":"%s","object":%s}\n' % (etype.encode(), obj_bytes(entry, raw)))

            def bookmark(rv, annotations=None):
                md = {"resourceVersion": str(rv)}
                if annotations:
                    md["annotations"] = annotations
                chunk(dumps({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version,
                                                              "metadata": md}}) + b"\n")

            def end_clean():
                self.wfile.write(b"0\r\n\r\n")

            if expired is not None:
                chunk(dumps({"type": "ERROR", "object": expired_status(expired)}) + b"\n")
                end_clean()
                return
            for e in initial:
                event("ADDED", e)
            if send_initial:
                bookmark(w.start_rv, {"k8s.io/initial-events-end": "true"})
            for ev in backlog:
                self._send_event(ev, w, event, table)
            w.cursor = w.start_rv
            start = time.monotonic()
            deadline = start + timeout_s
            interval = srv.bookmark_interval_s
            next_bm = start + interval if bookmarks and interval > 0 else None
            fd = sock.fileno()
            while True:
                now = time.monotonic()
                if now >= deadline:
                    end_clean()
                    return
                if next_bm is not None and now >= next_bm:
                    bookmark(w.cursor)
                    next_bm = now + interval
                wait = deadline - now
                if next_bm is not None:
                    wait = min(wait, next_bm - now)
                wait = max(0.0, min(wait, 1.0))
                try:
                    item = w.q.get(timeout=wait)
                except queue.Empty:
                    r, _, _ = select.select([fd], [], [], 0)
                    if r:  # the client closed (or sent something: it may not, mid-response)
                        raise _Drop()
                    continue
                if isinstance(item, Event):
                    self._send_event(item, w, event, table)
                elif item[0] == "expire":
                    msg = "too old resource version: %d (%d)" % (w.cursor, item[1])
                    chunk(dumps({"type": "ERROR", "object": expired_status(msg)}) + b"\n")
                    end_clean()
                    return
                elif item[0] == "inject":
                    chunk(item[1])
                elif item[0] == "drop":
                    raise _Drop()
        except _Drop:
            self.close_connection = True
            try:
                sock.shutdown(socket.SHUT_RDWR)  # no final chunk, no TLS close_notify
            except OSError:
                pass
        finally:
            st.close_watch(w)

    def _send_event(self, ev, w, event, table):
        w.cursor = ev.rv
        new_ok = w.matches(ev.new.obj)
        old_ok = ev.old is not None and w.matches(ev.old.obj)
        if ev.type == "ADDED":
            if new_ok:
                event("ADDED", ev.new)
        elif ev.type == "MODIFIED":
            if new_ok and old_ok:
                event("MODIFIED", ev.new)
            elif new_ok:
                event("ADDED", ev.new)
            elif old_ok:
                # stopped matching: DELETED with the previous object at the new resourceVersion
                o = ev.old.copy()
                o["metadata"]["resourceVersion"] = str(ev.rv)
                event("DELETED", ev.old, o)
        elif ev.type == "DELETED":
            if old_ok:
                event("DELETED", ev.new)

    # -- single objects ------------------------------------------------------------------------
    def _check_content_type(self, res, allowed):
        ct = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if ct not in allowed:
            raise ApiError(415, "UnsupportedMediaType",
                           'the body of the request was in an unknown format - accepted media types include: %s'
                           % ", ".join(allowed))
        return ct

    def _delete_options(self):
        opts = {}
        body = self._json_body(required=False)
        if body is not None:
            if not isinstance(body, dict):
                raise bad_request("DeleteOptions must be a JSON object")
            opts.update(body)
        if "gracePeriodSeconds" in self.query:
            try:
                opts["gracePeriodSeconds"] = int(self.query["gracePeriodSeconds"])
            except ValueError:
                raise bad_request('invalid gracePeriodSeconds: "%s"' % self.query["gracePeriodSeconds"])
        g = opts.get("gracePeriodSeconds")
        if g is not None and (not isinstance(g, int) or isinstance(g, bool)):
            raise bad_request("gracePeriodSeconds must be an integer")
        return opts

    def _object(self, method, res, ns, name, sub):
        srv = self.server
        api = srv.api
        if method in ("GET", "HEAD"):
            srv.stats.inc("get")
            e = api.get(res, ns, name)
            if _accepts_table(self.headers.get("Accept")):
                return self.send_json(200, table_for(res, [e], {"resourceVersion": e.obj["metadata"]["resourceVersion"]},
                                                     self.query.get("includeObject", "Metadata")))
            return self.send_bytes(200, e.full)
        if method == "PUT":
            srv.stats.inc("update")
            self._check_content_type(res, ("application/json",))
            body = self._json_body()
            if not isinstance(body, dict):
                raise bad_request("the body of the request must be a JSON object")
            e = api.update(res, ns, name, lambda cur: body, subresource=sub)
            return self.send_bytes(200, e.full)
        if method == "PATCH":
            srv.stats.inc("patch")
            allowed = ["application/json-patch+json", "application/merge-patch+json"]
            if res.typed_list:
                allowed.append("application/strategic-merge-patch+json")
            ct = self._check_content_type(res, tuple(allowed))
            patch = self._json_body()

            def mutate(cur):
                try:
                    if ct == "application/json-patch+json":
                        return json_patch(cur, patch)
                    if not isinstance(patch, dict):
                        raise bad_request("a merge patch must be a JSON object")
                    if ct == "application/merge-patch+json":
                        return merge_patch(cur, patch)
                    return strategic_merge_patch(cur, patch)
                except (ValueError, IndexError, TypeError, KeyError) as ex:
                    raise ApiError(422, "Invalid", "the server rejected our request due to an error in our "
                                   "request: %s" % ex)
            body_rv = _get(patch, "metadata", "resourceVersion") if isinstance(patch, dict) else None
            e = api.update(res, ns, name, mutate, subresource=sub, body_rv=body_rv)
            return self.send_bytes(200, e.full)
        if method == "DELETE":
            srv.stats.inc("delete")
            if sub:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            opts = self._delete_options()
            e, removed = api.delete(res, ns, name, opts)
            if res.graceful or not removed:
                return self.send_bytes(200, e.full)
            d = _details(res, name)
            d["uid"] = e.obj["metadata"].get("uid")
            return self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                        "status": "Success", "details": d})
        if method == "POST":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    # -- control endpoints ---------------------------------------------------------------------
    def _control(self, method, path):
        srv = self.server
        st = srv.store
        if path == "/_standin/stats" and method in ("GET", "HEAD"):
            with st.lock:
                watches = [w.describe() for w in sorted(st.watchers, key=lambda w: w.id)]
                out = {"open_watches": len(watches), "watches": watches,
                       "requests": srv.stats.snapshot(), "resourceVersion": str(st.rv),
                       "oldestResourceVersion": str(st.floor),
                       "objects": {r: len(o) for r, o in st.objs.items()}}
            return self.send_json(200, out)
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", "control endpoints take POST (stats: GET)")
        body = self._json_body(required=False) or {}
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        if path == "/_standin/stats/reset":
            srv.stats.reset()
            return self.send_json(200, {})
        if path == "/_standin/expire":
            n = st.expire()
            return self.send_json(200, {"resourceVersion": str(st.rv), "watches": n})
        if path == "/_standin/inject":
            line = body.get("line")
            if not isinstance(line, str):
                raise bad_request('expected {"line": "<text>"}')
            n = st.broadcast(("inject", line.encode("utf-8") + b"\n"), PODS)
            return self.send_json(200, {"watches": n})
        if path == "/_standin/drop-watches":
            n = st.broadcast(("drop",))
            return self.send_json(200, {"watches": n})
        if path == "/_standin/tokens":
            toks = body.get("tokens")
            if not isinstance(toks, list) or not all(isinstance(t, str) and t for t in toks):
                raise bad_request('expected {"tokens": ["a", ...]}')
            srv.set_tokens(toks)
            return self.send_json(200, {"tokens": len(toks)})
        if path == "/_standin/pods/bulk":
            return self.send_json(201, self._bulk(body))
        raise ApiError(404, "NotFound", "no such control endpoint: %s" % path)

    def _bulk(self, body):
        srv = self.server
        st = srv.store
        ns = body.get("namespace") or "default"
        _ns_check(ns)
        try:
            count = int(body.get("count", 1))
            port = int(body.get("port", 8000))
        except (TypeError, ValueError):
            raise bad_request("count and port must be integers")
        labels = body.get("labels") or {}
        annotations = body.get("annotations") or {}
        ready = bool(body.get("ready", True))
        prefix = str(body.get("ip_prefix", "10.0")).strip(".")
        name_prefix = body.get("name_prefix") or "bulk-"
        octets = prefix.split(".") if prefix else []
        free = 4 - len(octets)
        if free < 1 or not all(o.isdigit() and int(o) < 256 for o in octets):
            raise bad_request("ip_prefix must be 1 to 3 dotted octets")
        capacity = 254 * (256 ** (free - 1))
        names = []
        with st.lock:
            used = {(_get(e.obj, "status", "podIP") or "") for e in st.objs["pods"].values()}
            existing = st.objs["pods"]
            ip_i, name_i = 0, 0
            now = now_rfc3339()
            for _ in range(count):
                while True:
                    if ip_i >= capacity:
                        raise bad_request("ip_prefix %s has no free addresses left" % prefix)
                    rest = []
                    v = ip_i
                    rest.append(str(v % 254 + 1))
                    v //= 254
                    for _ in range(free - 1):
                        rest.append(str(v % 256))
                        v //= 256
                    ip = ".".join(octets + list(reversed(rest)))
                    ip_i += 1
                    if ip not in used:
                        break
                used.add(ip)
                while (ns, "%s%05d" % (name_prefix, name_i)) in existing:
                    name_i += 1
                name = "%s%05d" % (name_prefix, name_i)
                name_i += 1
                cond = "True" if ready else "False"
                obj = {"kind": "Pod", "apiVersion": "v1",
                       "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                                    "creationTimestamp": now, "labels": dict(labels),
                                    "annotations": dict(annotations)},
                       "spec": {"containers": [{"name": "engine", "image": "infera/fake-engine:standin",
                                                "ports": [{"name": "http", "containerPort": port}]}],
                                "nodeName": "standin-node"},
                       "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                                  "hostIP": "192.168.0.1", "startTime": now,
                                  "conditions": [{"type": "Ready", "status": cond, "lastProbeTime": None,
                                                  "lastTransitionTime": now},
                                                 {"type": "ContainersReady", "status": cond, "lastProbeTime": None,
                                                  "lastTransitionTime": now}],
                                  "containerStatuses": [{"name": "engine", "ready": ready, "restartCount": 0,
                                                         "image": "infera/fake-engine:standin", "imageID": "",
                                                         "started": True, "state": {"running": {"startedAt": now}}}]}}
                if not annotations:
                    del obj["metadata"]["annotations"]
                pod_defaults(obj)
                validate(PODS, obj, name)
                st._commit(PODS, (ns, name), _ordered(PODS, obj), "ADDED", flush=False)
                names.append(name)
            st._journal_flush()
            rv = st.rv
        return {"created": len(names), "names": names, "resourceVersion": str(rv)}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, ssl_ctx, store, args):
        self.ssl_ctx = ssl_ctx
        self.store = store
        self.api = Api(store)
        self.stats = Stats()
        self.verbose = args.verbose
        self.bookmark_interval_s = args.bookmark_interval_s
        self.token_file = os.path.join(args.dir, "token")
        self.extra_tokens = set()
        self.tok_lock = threading.Lock()
        self.started_at = now_rfc3339()
        super().__init__(addr, Handler)
        self.port = self.server_address[1]

    def accepted_tokens(self):
        with self.tok_lock:
            toks = set(self.extra_tokens)
        try:
            with open(self.token_file) as f:
                t = f.read().strip()
            if t:
                toks.add(t)
        except OSError:
            pass
        return toks

    def set_tokens(self, toks):
        with self.tok_lock:
            self.extra_tokens = set(toks)
            write_file(self.token_file, toks[0], 0o600)

    def finish_request(self, request, client_address):
        tls = None
        try:
            request.settimeout(10)
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            first = request.recv(1, socket.MSG_PEEK)
            if first and first != b"\x16":  # not a TLS handshake: answer as Go's server does
                request.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
                request.close()
                return
            tls = self.ssl_ctx.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            tls.do_handshake()
        except (OSError, ValueError) as e:
            if self.verbose:
                sys.stderr.write("standin: TLS handshake from %s failed: %s\n" % (client_address, e))
            try:
                (tls or request).close()
            except OSError:
                pass
            return
        try:
            tls.settimeout(IDLE_TIMEOUT_S)
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


# ----------------------------------------------------------------------------------------------
# PKI and kubeconfigs

def write_file(path, data, mode=0o644):
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _openssl(*args):
    p = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise SystemExit("standin: openssl %s failed: %s" % (" ".join(args[:2]), p.stderr.decode(errors="replace")))


def ensure_pki(d):
    paths = {n: os.path.join(d, n) for n in ("ca.crt", "ca.key", "server.crt", "server.key", "client.crt", "client.key")}
    fresh_ca = False
    with tempfile.TemporaryDirectory(prefix="standin-pki-") as tmp:
        if not (os.path.exists(paths["ca.crt"]) and os.path.exists(paths["ca.key"])):
            cnf = os.path.join(tmp, "ca.cnf")
            write_file(cnf, "[req]\ndistinguished_name=dn\nprompt=no\nx509_extensions=v3\n[dn]\n"
                            "CN=infera-standin-ca\n[v3]\nbasicConstraints=critical,CA:TRUE\n"
                            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
                            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always\n")
            _openssl("req", "-x509", "-config", cnf, "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-keyout", os.path.join(tmp, "ca.key"), "-out", os.path.join(tmp, "ca.crt"),
                     "-days", "3650", "-set_serial", "0x%x" % secrets.randbits(63))
            os.chmod(os.path.join(tmp, "ca.key"), 0o600)
            os.replace(os.path.join(tmp, "ca.key"), paths["ca.key"])
            os.replace(os.path.join(tmp, "ca.crt"), paths["ca.crt"])
            fresh_ca = True
        for leaf, cn, ext in (
                ("server", "kube-apiserver", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                ("client", "infera-test", "extendedKeyUsage=clientAuth\n")):
            crt, key = paths[leaf + ".crt"], paths[leaf + ".key"]
            if not fresh_ca and os.path.exists(crt) and os.path.exists(key):
                continue
            cnf = os.path.join(tmp, leaf + ".cnf")
            write_file(cnf, "[req]\ndistinguished_name=dn\nprompt=no\n[dn]\nCN=%s\n" % cn)
            extf = os.path.join(tmp, leaf + ".ext")
            write_file(extf, "[v3]\nbasicConstraints=critical,CA:FALSE\n"
                             "keyUsage=critical,digitalSignature,keyEncipherment\n"
                             "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n" + ext)
            csr = os.path.join(tmp, leaf + ".csr")
            _openssl("req", "-new", "-config", cnf, "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-keyout", os.path.join(tmp, leaf + ".key"), "-out", csr)
            _openssl("x509", "-req", "-in", csr, "-CA", paths["ca.crt"], "-CAkey", paths["ca.key"],
                     "-set_serial", "0x%x" % secrets.randbits(63), "-days", "3650",
                     "-extfile", extf, "-extensions", "v3", "-out", os.path.join(tmp, leaf + ".crt"))
            os.chmod(os.path.join(tmp, leaf + ".key"), 0o600)
            os.replace(os.path.join(tmp, leaf + ".key"), key)
            os.replace(os.path.join(tmp, leaf + ".crt"), crt)
    return paths


_YAML_PLAIN = re.compile(r"^[A-Za-z0-9_./:+=@-]+$")


def _y(s):
    s = str(s)
    if _YAML_PLAIN.match(s) and not s[0] in "-:@" and s.lower() not in ("true", "false", "null", "yes", "no", "on", "off", "~"):
        return s
    return json.dumps(s)


def write_kubeconfigs(d, port, paths):
    def b64(p):
        with open(p, "rb") as f:
            return base64.b64encode(f.read()).decode()

    server = "https://127.0.0.1:%d" % port
    ca_data = b64(paths["ca.crt"])

    def cfg(cluster_lines, user_lines):
        return ("apiVersion: v1\nclusters:\n- cluster:\n%s    server: %s\n  name: infera-standin\n"
                "contexts:\n- context:\n    cluster: infera-standin\n    namespace: default\n"
                "    user: infera-test\n  name: infera-standin\ncurrent-context: infera-standin\n"
                "kind: Config\npreferences: {}\nusers:\n- name: infera-test\n  user:\n%s"
                % (cluster_lines, server, user_lines))

    with open(os.path.join(d, "token")) as f:
        token = f.read().strip()
    write_file(os.path.join(d, "kubeconfig"),
               cfg("    certificate-authority-data: %s\n" % ca_data, "    token: %s\n" % _y(token)), 0o600)
    write_file(os.path.join(d, "kubeconfig-files"),
               cfg("    certificate-authority: %s\n" % _y(os.path.abspath(paths["ca.crt"])),
                   "    tokenFile: %s\n" % _y(os.path.abspath(os.path.join(d, "token")))), 0o600)
    write_file(os.path.join(d, "kubeconfig-cert"),
               cfg("    certificate-authority-data: %s\n" % ca_data,
                   "    client-certificate-data: %s\n    client-key-data: %s\n"
                   % (b64(paths["client.crt"]), b64(paths["client.key"]))), 0o600)
    write_file(os.path.join(d, "port"), "%d\n" % port)


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description="A Kubernetes API server stand-in for infera's tests.")
    ap.add_argument("--dir", required=True, help="directory for the PKI, token, kubeconfigs and port file")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    ap.add_argument("--token", default=None, help="the accepted bearer token (default: DIR/token, else random)")
    ap.add_argument("--bookmark-interval-s", type=float, default=1.0)
    ap.add_argument("--history", type=int, default=1000, help="watch events kept for resourceVersion watches")
    ap.add_argument("--state-file", default=None, help="keep objects and the resourceVersion across restarts")
    ap.add_argument("--max-grace-s", type=float, default=1.0, help="cap on a graceful deletion's wait")
    ap.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = ap.parse_args(argv)

    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    args.dir = d
    paths = ensure_pki(d)
    tok_path = os.path.join(d, "token")
    if args.token is not None:
        write_file(tok_path, args.token, 0o600)  # no newline: python3-kubernetes sends tokenFile verbatim
    elif not os.path.exists(tok_path) or not open(tok_path).read().strip():
        write_file(tok_path, secrets.token_hex(24), 0o600)
    write_file(os.path.join(d, "namespace"), "default")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["server.crt"], paths["server.key"])
    ctx.load_verify_locations(paths["ca.crt"])
    ctx.verify_mode = ssl.CERT_OPTIONAL
    try:
        ctx.set_alpn_protocols(["http/1.1"])
    except NotImplementedError:
        pass

    store = Store(args.history, os.path.abspath(args.state_file) if args.state_file else None, args.max_grace_s)
    srv = Server(("127.0.0.1", args.port), ctx, store, args)
    write_kubeconfigs(d, srv.port, paths)

    stopping = threading.Event()

    def on_signal(signum, frame):
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.stdout.write(json.dumps({"port": srv.port}) + "\n")
    sys.stdout.flush()
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        store.close()
        try:
            srv.socket.close()
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
