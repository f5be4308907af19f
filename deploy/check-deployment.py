#!/usr/bin/env python3
"""Static checks of the deployment files (no Docker, no cluster): run by deploy/local/test.sh.

- docker-compose.yml: parses; every variable it interpolates is listed in .env.example, and
  every required one (`${NAME:?...}`) has a value there, so `cp .env.example .env` starts;
  long-running services have a restart policy and a healthcheck; only the proxy publishes a port;
  Kafka's log directories are on its volume.
- deploy/observability: `promtool check rules`, `promtool test rules`; every alert has a unit test
  and a RUNBOOK.md section; the dashboard is JSON.
- libmicrohttpd: the image's build stage builds the same pinned Debian source package (version,
  .dsc and upstream tarball checksums) as deploy/local/install.sh, with the same script, installs
  no Debian libmicrohttpd, and the runtime stage ships the library it built.
- deploy/k8s: base and example overlay render with `kubectl kustomize` and every object validates
  against the Kubernetes schemas (`kubernetes-validate --strict`); the KEDA ScaledObject (no
  schema there) is checked against the Deployment and the ConfigMap; every container runs
  non-root on a read-only root file system with resources and probes.

Usage: check-deployment.py [--promtool PATH] [--kubectl PATH] [--kubernetes-validate PATH]
Prints one line per problem and exits 1 when there is any.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
problems: list[str] = []


def problem(message: str) -> None:
    if message in problems:  # YAML merge keys repeat a service's environment in another
        return
    problems.append(message)
    print(f"  problem: {message}", file=sys.stderr)


def env_example() -> dict[str, str]:
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            problem(f".env.example: not NAME=value: {line!r}")
            continue
        values[name] = value
    return values


INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def check_compose() -> None:
    path = ROOT / "docker-compose.yml"
    compose = yaml.safe_load(path.read_text())
    documented = env_example()
    for text in strings(compose):
        for match in INTERPOLATION.finditer(text.replace("$$", "")):
            name, operator = match.group(1), match.group(2) or ""
            if name not in documented:
                problem(f"docker-compose.yml uses ${{{name}}}, which .env.example does not list")
            elif operator.endswith("?") and not documented[name]:
                problem(f"docker-compose.yml requires {name}, which .env.example leaves empty")
    services = compose.get("services", {})
    one_shot = {name for name, s in services.items() if str(s.get("restart", "")) in ("no", "on-failure")}
    for name, service in services.items():
        if not service.get("restart"):
            problem(f"compose service {name} has no restart policy")
        if name not in one_shot and "healthcheck" not in service:
            problem(f"compose service {name} has no healthcheck")
        if service.get("ports") and name != "proxy":
            problem(f"compose service {name} publishes ports; only the proxy may")
        for dependency, condition in (service.get("depends_on") or {}).items():
            wanted = "service_completed_successfully" if dependency in one_shot else "service_healthy"
            if condition.get("condition") != wanted:
                problem(f"compose service {name} waits for {dependency} with {condition}, expected {wanted}")
    kafka = services.get("kafka", {})
    log_dirs = kafka.get("environment", {}).get("KAFKA_LOG_DIRS")
    mounts = [v.split(":")[1] for v in kafka.get("volumes", []) if v.startswith("kafka-data:")]
    if not log_dirs or any(not any(d == m or d.startswith(m + "/") for m in mounts) for d in log_dirs.split(",")):
        problem(f"Kafka's KAFKA_LOG_DIRS ({log_dirs}) is not on the kafka-data volume ({mounts})")
    if "CLUSTER_ID" not in json.dumps(kafka.get("command", "")):
        problem("Kafka's cluster id is not the stack's generated one")


def run(command: list[str], what: str) -> str | None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        problem(f"{what} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
        return None
    return result.stdout


def check_observability(promtool: str) -> None:
    folder = ROOT / "deploy" / "observability"
    run([promtool, "check", "rules", str(folder / "alerts.yml")], "promtool check rules")
    run([promtool, "test", "rules", str(folder / "alerts.test.yml")], "promtool test rules")
    alerts = [r["alert"] for g in yaml.safe_load((folder / "alerts.yml").read_text())["groups"] for r in g["rules"] if "alert" in r]
    tests = yaml.safe_load((folder / "alerts.test.yml").read_text())["tests"]
    tested = {t["alertname"] for test in tests for t in test.get("alert_rule_test", []) if t.get("exp_alerts")}
    runbook = (folder / "RUNBOOK.md").read_text()
    for alert in alerts:
        if alert not in tested:
            problem(f"alert {alert} has no unit test in which it fires")
        if f"\n## {alert}\n" not in runbook:
            problem(f"alert {alert} has no section in RUNBOOK.md")
    try:
        dashboard = json.loads((folder / "grafana-dashboard.json").read_text())
    except ValueError as error:
        problem(f"grafana-dashboard.json: {error}")
        dashboard = {}
    # Every metric the rules and the dashboard read is one the services export.
    exported = "\n".join(p.read_text() for d in ("Shared", "Services") for p in (ROOT / d).rglob("*.swift"))
    expressions = [r["expr"] for g in yaml.safe_load((folder / "alerts.yml").read_text())["groups"] for r in g["rules"]]
    expressions += [t["expr"] for panel in dashboard.get("panels", []) for t in panel.get("targets", [])]
    for expression in expressions:
        for name in set(re.findall(r"\b((?:subs|appstore|process|kafka|http|postgres)_[a-z0-9_]+)", expression)):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            if f'"{name}"' not in exported and f'"{base}"' not in exported:
                problem(f"{name} (in alerts.yml or the dashboard) is not a metric any service exports")


MHD_PINS = ("MHD_SOURCE_VERSION", "MHD_DSC_SHA256", "MHD_ORIG_SHA256")


def check_libmicrohttpd() -> None:
    env = (ROOT / "deploy" / "local" / "env.sh").read_text()
    install = (ROOT / "deploy" / "local" / "install.sh").read_text()
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    stages = re.split(r"(?m)^FROM ", dockerfile)
    build = next((stage for stage in stages if re.match(r"\S+ AS build\b", stage)), "")
    runtime = stages[-1]
    for name in MHD_PINS:
        local = re.findall(rf'(?m)^{name}="([^"]*)"', env)
        image = re.findall(rf"(?m)^ARG {name}=(\S+)", build)
        if len(local) != 1 or not local[0]:
            problem(f"deploy/local/env.sh does not pin {name} once")
        elif image != local:
            problem(f"the Dockerfile's build stage pins {name} to {', '.join(image) or 'nothing'}, env.sh to {local[0]}")
    call = re.compile(r'build-libmicrohttpd\.sh"? +"\$MHD_SOURCE_VERSION" "\$MHD_DSC_SHA256" "\$MHD_ORIG_SHA256"')
    if not call.search(install):
        problem("deploy/local/install.sh does not build libmicrohttpd with the pins of env.sh")
    if not call.search(build) or "COPY deploy/local/build-libmicrohttpd.sh" not in build:
        problem("the Dockerfile's build stage does not build libmicrohttpd with deploy/local/build-libmicrohttpd.sh and its pins")
    if re.search(r"\blibmicrohttpd(-dev|12)\b", dockerfile + install):
        problem("a Debian libmicrohttpd package is installed (bookworm's is 0.9.75; the pinned build replaces it)")
    if not re.search(r"(?m)^COPY --from=build \S*libmicrohttpd\.so\.12 /usr/local/lib/subs/", runtime):
        problem("the runtime stage does not ship the libmicrohttpd the build stage built")


def check_kubernetes(kubectl: str, validator: str) -> None:
    for folder in ("deploy/k8s/base", "deploy/k8s/overlays/example"):
        rendered = run([kubectl, "kustomize", str(ROOT / folder)], f"kubectl kustomize {folder}")
        if rendered is None:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
            file.write(rendered)
            file.flush()
            output = run([validator, "--strict", "--quiet", file.name], f"kubernetes-validate {folder}")
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        schemaless = {o["kind"] for o in objects if o["apiVersion"].startswith("keda.sh/")}
        if output is not None and output.strip():
            # --quiet prints only warnings and failures; a missing schema is tolerated for KEDA alone.
            for line in output.strip().splitlines():
                if not ("Couldn't find schema for kind" in line and any(f"kind {k} " in line for k in schemaless)):
                    problem(f"kubernetes-validate {folder}: {line}")
        check_objects(folder, objects)


def check_objects(folder: str, objects: list[dict]) -> None:
    by_kind: dict[str, dict[str, dict]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    config = by_kind.get("ConfigMap", {}).get("subs-config", {}).get("data", {})
    for name, scaled in by_kind.get("ScaledObject", {}).items():
        target = scaled["spec"]["scaleTargetRef"]["name"]
        if target not in by_kind.get("Deployment", {}):
            problem(f"{folder}: ScaledObject {name} scales {target}, which is not a Deployment here")
        partitions = int(config.get("EVENT_TOPIC_PARTITIONS", "12"))
        if scaled["spec"].get("maxReplicaCount") != partitions:
            problem(f"{folder}: ScaledObject {name} maxReplicaCount is not EVENT_TOPIC_PARTITIONS ({partitions})")
        for trigger in scaled["spec"]["triggers"]:
            meta = trigger.get("metadata", {})
            if trigger.get("type") != "kafka":
                continue
            if meta.get("topic") != config.get("EVENT_TOPIC", "appstore.events.v1"):
                problem(f"{folder}: ScaledObject {name} watches topic {meta.get('topic')}, not EVENT_TOPIC")
            if meta.get("consumerGroup") != config.get("FULFILLMENT_GROUP_ID", "fulfillment"):
                problem(f"{folder}: ScaledObject {name} watches group {meta.get('consumerGroup')}, not FULFILLMENT_GROUP_ID")
            if meta.get("bootstrapServers") != config.get("KAFKA_BROKERS"):
                problem(f"{folder}: ScaledObject {name} asks {meta.get('bootstrapServers')}, not KAFKA_BROKERS")
    for kind in ("Deployment", "Job"):
        for name, o in by_kind.get(kind, {}).items():
            pod = o["spec"]["template"]["spec"]
            if not pod.get("securityContext", {}).get("runAsNonRoot"):
                problem(f"{folder}: {kind} {name} may run as root")
            for c in pod["containers"]:
                security = c.get("securityContext", {})
                if not security.get("readOnlyRootFilesystem") or security.get("allowPrivilegeEscalation") is not False:
                    problem(f"{folder}: {kind} {name}/{c['name']} lacks a read-only root or allows privilege escalation")
                if "requests" not in c.get("resources", {}) or "memory" not in c.get("resources", {}).get("limits", {}):
                    problem(f"{folder}: {kind} {name}/{c['name']} lacks resource requests or a memory limit")
                if kind == "Deployment" and not ("readinessProbe" in c and "livenessProbe" in c):
                    problem(f"{folder}: Deployment {name}/{c['name']} lacks a readiness or liveness probe")
    for name in by_kind.get("Deployment", {}):
        budgets = [p for p in by_kind.get("PodDisruptionBudget", {}).values()
                   if p["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name") == name]
        if not budgets:
            problem(f"{folder}: Deployment {name} has no PodDisruptionBudget")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promtool", default="promtool")
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--kubernetes-validate", dest="validator", default="kubernetes-validate")
    arguments = parser.parse_args()
    check_compose()
    check_libmicrohttpd()
    check_observability(arguments.promtool)
    check_kubernetes(arguments.kubectl, arguments.validator)
    if problems:
        print(f"deployment check: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("deployment check: compose, libmicrohttpd pins, alerts (promtool), Kubernetes (kustomize, schemas) all pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
