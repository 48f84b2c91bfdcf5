"""``make lab-traffic SERVICE=lab-ngram``: live traffic on a lab service, for canary.yml and guard.yml.

Both read what production traffic does to the service (canary: latency and acceptance of each arm
under it; guard: acceptance): in the lab nothing sends any unless you do. This sends repetitive
greedy completions (text that n-gram and suffix drafting can find again in the prompt) to the
service's address (its InferenceService's ``status.url``, which the lab serves on 127.0.0.1),
bounded in time and rate, then says how many were answered. It refuses an address that is not this
machine's: it is a lab tool, never load on a real cluster.

Usage: ``python -m specpilot_lab.traffic SERVICE [--seconds 120] [--qps 1] [--max-tokens 32]
[--namespace specpilot-lab]`` (``make lab-traffic SERVICE=... SECONDS=... QPS=...``). Run it in a
second terminal while canary.yml runs, or just before guard.yml.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from .processes import LabPaths

MAX_SECONDS = 1800
MAX_QPS = 10.0
BATCH_SECONDS = 10  # the deadline is checked between batches of this many seconds' requests
# repetitive text: the continuation repeats what the prompt already holds
PROMPTS = [
    "one two three four one two three four one two three four one two",
    "the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "a b c d e a b c d e a b c d e a b c",
    "red green blue red green blue red green blue red green",
]


class TrafficError(Exception):
    pass


def loopback_url(url: str) -> str:
    """The URL when its host is this machine (127.0.0.0/8, ::1, localhost), else TrafficError."""
    host = urlsplit(url or "").hostname or ""
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise TrafficError(
            f"{url or '(no url)'} is not on this machine: lab traffic goes to loopback addresses only "
            "(is KUBECONFIG another cluster's? `make lab-status` prints the lab's)"
        )
    return url


def bounded(seconds: float, qps: float) -> tuple[float, float]:
    if not 0 < seconds <= MAX_SECONDS:
        raise TrafficError(f"--seconds {seconds:g}: give 1 to {MAX_SECONDS}")
    if not 0 < qps <= MAX_QPS:
        raise TrafficError(f"--qps {qps:g}: give more than 0 and at most {MAX_QPS:g}")
    return seconds, qps


def service_url(kubeconfig: Path, namespace: str, service: str) -> str:
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
    try:
        isvc = api.get_namespaced_custom_object(
            "serving.kserve.io", "v1beta1", namespace, "inferenceservices", service
        )
    except client.ApiException as exc:
        if exc.status == 404:
            raise TrafficError(
                f"{namespace}/{service}: no such InferenceService (deploy it first: "
                f"ansible-playbook -i inventories/lab playbooks/deploy.yml --limit {service})"
            ) from None
        raise
    url = (isvc.get("status") or {}).get("url")
    if not url:
        raise TrafficError(f"{namespace}/{service}: no status.url yet (is it Ready? `make lab-status`)")
    return loopback_url(url)


def batch_config(url: str, service: str, qps: float, seconds: float, max_tokens: int) -> dict:
    requests = max(1, round(qps * seconds))
    runs = max(1, -(-requests // len(PROMPTS)))
    return {
        "base_url": url,
        "model": service,
        "prompts": [{"id": f"p{i}", "prompt": p} for i, p in enumerate(PROMPTS)],
        "runs_per_prompt": runs,
        "warmup_requests": 0,
        "qps": qps,
        "concurrency": 4,
        "sampling": {"temperature": 0.0, "max_tokens": max_tokens},
        "scrape_metrics": False,
        "force_close": True,  # a new connection per request: the Service proxy spreads them by weight
        "timeout": 60,
        "progress_interval": 0,
    }


def send(
    url: str, service: str, seconds: float, qps: float, max_tokens: int, out=sys.stdout, stop=None
) -> tuple[int, int]:
    """Traffic until ``seconds`` pass (or ``stop``, a threading.Event, is set); (answered, failed)."""
    from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client

    ok = failed = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0.5 and not (stop is not None and stop.is_set()):
        cfg = batch_config(url, service, qps, min(BATCH_SECONDS, left), max_tokens)
        try:
            result = bench_client.run_one(cfg)
        except Exception as exc:  # the address may refuse while a predictor rolls out: go on
            failed += 1
            print(f"lab-traffic: {service}: {exc}", file=out, flush=True)
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            continue
        done = sum(1 for r in result.get("requests", []) if r.get("ok"))
        ok += done
        failed += len(result.get("requests", [])) - done
        print(f"lab-traffic: {service}: {ok} answered, {failed} failed so far", file=out, flush=True)
    return ok, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specpilot_lab.traffic", description=__doc__.splitlines()[0])
    p.add_argument("service", help="the lab service (InferenceService name), e.g. lab-ngram")
    p.add_argument("--seconds", type=float, default=120.0, help=f"how long (at most {MAX_SECONDS}; default 120)")
    p.add_argument("--qps", type=float, default=1.0, help=f"requests per second (at most {MAX_QPS:g}; default 1)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per completion (default 32)")
    p.add_argument("--namespace", default="specpilot-lab", help="default: specpilot-lab (inventories/lab)")
    p.add_argument("--kubeconfig", help="default: the lab's (.lab/kubeconfig)")
    args = p.parse_args(argv)
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else LabPaths.default().kubeconfig
    try:
        seconds, qps = bounded(args.seconds, args.qps)
        if not kubeconfig.exists():
            raise TrafficError(f"{kubeconfig}: no lab kubeconfig (make lab-up)")
        url = service_url(kubeconfig, args.namespace, args.service)
    except TrafficError as exc:
        print(f"lab-traffic: {exc}", file=sys.stderr)
        return 2
    print(f"lab-traffic: {args.service} at {url}: {qps:g} requests/s for {seconds:g} s", flush=True)
    ok, failed = send(url, args.service, seconds, qps, args.max_tokens)
    print(f"lab-traffic: {args.service}: done, {ok} answered, {failed} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
