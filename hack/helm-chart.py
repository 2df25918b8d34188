"""Render, lint, install or uninstall a chart with Helm's SDK (helm-python-sdk); see hack/helm.sh."""
import json
import os
import sys

import helm_python as helm


def main(argv):
    command, chart, values = argv[1], argv[2], json.loads(argv[3])
    if command == "lint":
        report = helm.lint(chart, values, strict=True)
        print(json.dumps(report, indent=2))
        failed = report.get("errors") or any(m.get("severity", 0) >= 2 for m in report.get("messages", []))
        return 1 if failed else 0
    if command == "render":
        namespace = argv[4]
        with helm.Chart.load(chart) as loaded:
            loaded.validate_schema(values)
            # The release is named after the chart's directory: wsync-agent, wsync-control-plane.
            release = os.path.basename(chart.rstrip("/"))
            manifests = loaded.render(values, name=release, namespace=namespace, is_install=True)
        # Objects only, in a stable order; NOTES.txt and empty templates dropped.
        for path in sorted(manifests):
            text = manifests[path].strip()
            if path.endswith("NOTES.txt") or not text:
                continue
            print(f"---\n# Source: {path}\n{text}")
        return 0
    if command == "render-for-cluster":
        # As `helm install --dry-run=server` renders: with the capabilities of the cluster
        # $KUBECONFIG names (its version picks policy/v1 or v1beta1); nothing is created.
        namespace = argv[4]
        release = os.path.basename(chart.rstrip("/"))
        with helm.Config(namespace=namespace) as config:
            done = config.install(chart, release, values, namespace=namespace, dry_run="server")
        summary = done.get("release", done) if isinstance(done, dict) else {}
        print(summary.get("manifest", ""))
        return 0
    if command in ("install", "uninstall"):
        # Into the cluster $KUBECONFIG names, as `helm install --create-namespace` would.
        namespace, release = argv[4], argv[5]
        with helm.Config(namespace=namespace) as config:
            if command == "install":
                done = config.install(chart, release, values, namespace=namespace, create_namespace=True, timeout=120)
            else:
                done = config.uninstall(release, ignore_not_found=True, timeout=120)
        summary = done.get("release", done) if isinstance(done, dict) else {}
        print(json.dumps({k: summary.get(k) for k in ("name", "namespace", "status")}, default=str))
        return 0
    print(f"unknown command {command!r}", file=sys.stderr)
    return 2


sys.exit(main(sys.argv))
