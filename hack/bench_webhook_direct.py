#!/usr/bin/env python3
"""Admission requests straight to the api-manager's pod webhook, at a fixed rate, until stopped.

hack/bench.sh uses it for "fencing while busy": the load must keep the api-manager busy, not the
apiserver (dry-run creates through a 2-core plane at 200/s for minutes starve every other client
of the apiserver, the fencer and the bench's own tool included, which measures the apiserver).

    bench_webhook_direct.py URL RPS NAMESPACE CLAIM   # e.g. https://10.0.0.5:17456/mutate-pods

On SIGTERM it prints {"sent", "errors", "p50_ms", "p99_ms"} as JSON and exits.
"""

import http.client
import json
import signal
import ssl
import sys
import threading
import time
import urllib.parse
import uuid

THREADS = 4


def review(namespace, claim):
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "busy", "namespace": namespace, "labels": {"bench.storageos.com/workload": "true"}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "busy", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "bench"}, "object": pod, "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def main():
    url, rps, namespace, claim = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    u = urllib.parse.urlsplit(url)
    ctx = ssl._create_unverified_context()  # the webhook's own self-signed serving certificate
    body = json.dumps(review(namespace, claim)).encode()
    stop = threading.Event()
    lock = threading.Lock()
    stats = {"sent": 0, "errors": 0, "ms": []}

    def worker(i):
        conn = None
        interval = THREADS / rps
        nxt = time.monotonic() + i * interval / THREADS
        while not stop.is_set():
            now = time.monotonic()
            if now < nxt:
                time.sleep(nxt - now)
            nxt += interval
            t0 = time.monotonic()
            ok = False
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=10)
                conn.request("POST", u.path, body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException):
                conn = None
            with lock:
                stats["sent"] += 1
                stats["errors"] += 0 if ok else 1
                stats["ms"].append((time.monotonic() - t0) * 1000)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()

    def done(*_):
        stop.set()
        with lock:
            ms = sorted(stats["ms"])
        pick = lambda p: round(ms[min(len(ms) - 1, int(p * len(ms)))], 1) if ms else None
        print(json.dumps({"rps": rps, "sent": stats["sent"], "errors": stats["errors"],
                          "p50_ms": pick(0.5), "p99_ms": pick(0.99)}), flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, done)
    signal.signal(signal.SIGINT, done)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
