#!/usr/bin/env python3
"""Bursts of server-side-apply PATCHes in the local apiserver's audit log, as the apiserver saw them.

    hack/audit-apply-runs.py [FIRST_LINE]

Reads $WSYNC_TEST_AUDIT_LOG (`hack/local-cluster.sh env` sets it) from line FIRST_LINE on and
prints one line per burst of Deployment and ConfigMap PATCHes (a gap over 0.8 s starts a new
one): when it began, how many, its span, the apiserver's own time per request (received to
response), and the mean number in flight. The scale benchmark's floor and agent resyncs
alternate, so consecutive bursts compare the two on the server's clock (BENCHMARKS.md, step 10).
"""
import datetime
import json
import os
import sys

GAP_S = 0.8


def seconds(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def patches(path, first_line):
    with open(path) as log:
        for number, line in enumerate(log):
            if number < first_line:
                continue
            event = json.loads(line)
            if event["verb"] == "patch" and event["objectRef"].get("resource") in ("deployments", "configmaps"):
                yield seconds(event["requestReceivedTimestamp"]), seconds(event["stageTimestamp"]), event["user"]["username"]


def bursts(requests):
    burst = []
    for request in sorted(requests):
        if burst and request[0] - burst[-1][0] > GAP_S:
            yield burst
            burst = []
        burst.append(request)
    if burst:
        yield burst


def main():
    path = os.environ.get("WSYNC_TEST_AUDIT_LOG")
    if not path:
        sys.exit('set WSYNC_TEST_AUDIT_LOG: eval "$(hack/local-cluster.sh env)"')
    first_line = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for burst in bursts(patches(path, first_line)):
        begin, end = burst[0][0], max(done for _, done, _ in burst)
        took = sorted(done - received for received, done, _ in burst)
        in_flight = sum(took) / max(end - begin, 1e-9)
        at = datetime.datetime.fromtimestamp(begin, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        print(
            f"{at} n={len(burst)} span={1000 * (end - begin):.0f}ms "
            f"server p50={1000 * took[len(took) // 2]:.1f}ms p90={1000 * took[int(len(took) * 0.9)]:.1f}ms "
            f"in_flight={in_flight:.1f} user={burst[0][2]}"
        )


if __name__ == "__main__":
    main()
