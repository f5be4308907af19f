#!/usr/bin/env python3
"""Static checks of the deployment files (no Docker, no cluster): run by deploy/local/test.sh.

- docker-compose.yml: parses; every variable it interpolates is listed in .env.example, and
  every required one (`${NAME:?...}`) has a value there, so `cp .env.example .env` starts;
  long-running services have a restart policy and a healthcheck; only the proxy publishes ports
  (beyond the public one, on 127.0.0.1 alone); Kafka's log directories are on its volume; a
  one-shot `migrate` service runs `subsctl migrate` and every service waits for it, with
  MIGRATE_ON_START=false; the ingress trusts X-Forwarded-For from exactly the proxy's network
  (INGRESS_TRUSTED_PROXIES = the subnet of the network it shares with the proxy alone), listens
  for the admin API beyond its loopback and gets ADMIN_TOKENS; stop_grace_period exceeds
  SHUTDOWN_GRACE_SECONDS.
- deploy/observability: `promtool check rules`, `promtool test rules`; every alert has a unit test
  and a RUNBOOK.md section; the dashboard is JSON; every scrape job an alert names is one the
  ServiceMonitor/PodMonitor of deploy/k8s/monitoring produce; alerts watch HTTP 5xx and latency,
  the App Store API's answers, credit job failures, overdue clearings, the outbox and the targets.
- libmicrohttpd: the image's build stage builds the same pinned Debian source package (version,
  .dsc and upstream tarball checksums) as deploy/local/install.sh, with the same script, installs
  no Debian libmicrohttpd, and the runtime stage ships the library it built.
- deploy/k8s: base and example overlay render with `kubectl kustomize` and every object validates
  against the Kubernetes schemas (`kubernetes-validate --strict`); the KEDA ScaledObject (no
  schema there) is checked against the Deployment and the ConfigMap; every container runs
  non-root on a read-only root file system with resources and probes; no Deployment that an HPA
  or ScaledObject scales sets `replicas`; a Deployment behind a Service has a preStop pause and
  every one a terminationGracePeriodSeconds above preStop + SHUTDOWN_GRACE_SECONDS; the
  ConfigMap sets MIGRATE_ON_START=false, INGRESS_TRUSTED_PROXIES and a non-loopback
  ADMIN_HTTP_HOST; the admin port has a Service and NetworkPolicy rules that name who may
  connect; in an overlay the set-up Job runs `subsctl migrate` and carries the hashed name of the
  ConfigMap it reads, whose `release` is the Job's image tag; the ServiceMonitor and PodMonitor
  select existing Services/pods and ports and name their jobs from a label those carry.
- deploy/UPGRADING.md lists every secret setting (ConfigurationReader.secretSettings) with its
  `_FILE` variant, and the overlay's Secret recipe names ADMIN_TOKENS.

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
    check_compose_operations(compose, documented)


def compose_value(value, documented: dict[str, str]) -> str:
    """A compose value with `${NAME:-default}` resolved as `cp .env.example .env` would."""
    def resolve(match):
        name, operator, default = match.group(1), match.group(2) or "", match.group(3) or ""
        return documented.get(name) or (default if operator == ":-" else "")
    return INTERPOLATION.sub(resolve, str(value))


def duration_seconds(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ms|h|m|s)", str(text)))


def check_compose_operations(compose: dict, documented: dict[str, str]) -> None:
    services = compose.get("services", {})
    migrate = services.get("migrate")
    if not migrate or "migrate" not in json.dumps([migrate.get("entrypoint"), migrate.get("command")]):
        problem("compose has no one-shot `migrate` service running `subsctl migrate`")
    apps = {name: s for name, s in services.items() if name in ("ingress", "fulfillment")}
    for name, service in apps.items():
        if (service.get("depends_on") or {}).get("migrate", {}).get("condition") != "service_completed_successfully":
            problem(f"compose service {name} does not wait for `migrate` to complete")
        environment = service.get("environment") or {}
        if str(environment.get("MIGRATE_ON_START", "false")).lower() != "false":
            problem(f"compose service {name} migrates on start; `migrate` alone must")
        grace = int(compose_value(environment.get("SHUTDOWN_GRACE_SECONDS", "20"), documented) or 20)
        if duration_seconds(service.get("stop_grace_period", "10s")) <= grace:
            problem(f"compose service {name}: stop_grace_period is not above SHUTDOWN_GRACE_SECONDS ({grace})")
    ingress = apps.get("ingress", {})
    proxy = services.get("proxy", {})
    environment = ingress.get("environment") or {}
    trusted = compose_value(environment.get("INGRESS_TRUSTED_PROXIES", ""), documented)
    shared = set(proxy.get("networks") or ["default"]) & set(ingress.get("networks") or ["default"])
    others = {n for name, s in services.items() if name not in ("proxy", "ingress") for n in (s.get("networks") or ["default"])}
    subnets = {compose_value(c.get("subnet", ""), documented)
               for n in shared for c in (((compose.get("networks") or {}).get(n) or {}).get("ipam") or {}).get("config", [])}
    if not trusted:
        problem("compose: the ingress behind the proxy has no INGRESS_TRUSTED_PROXIES")
    elif shared & others or subnets != {trusted}:
        problem(f"compose: INGRESS_TRUSTED_PROXIES ({trusted}) is not the subnet {sorted(subnets)} of a network only "
                f"the proxy and the ingress share ({sorted(shared)})")
    if compose_value(environment.get("ADMIN_HTTP_HOST", "127.0.0.1"), documented).startswith("127."):
        problem("compose: the ingress's admin listener stays on its loopback (ADMIN_HTTP_HOST), unreachable")
    if "ADMIN_TOKENS" not in environment:
        problem("compose: the ingress gets no ADMIN_TOKENS")
    for port in (proxy.get("ports") or [])[1:]:
        if not str(port).startswith("127.0.0.1:"):
            problem(f"compose: the proxy publishes {port} beyond the host's loopback; only the public API may")


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
    # What issue #26 found unwatched: each of these must be read by some alert.
    alerting = " ".join(r["expr"] for g in yaml.safe_load((folder / "alerts.yml").read_text())["groups"] for r in g["rules"])
    for signal, metric in (("HTTP 5xx and p99 per route group", "http_server_request_duration_seconds"),
                           ("App Store API 401/403", "appstore_server_api_responses_total"),
                           ("credit job failures", "subs_credit_job_failures_total"),
                           ("overdue clearings", "subs_credit_expiry_clearings_overdue"),
                           ("the outbox backlog", "subs_outbox_oldest_age_seconds"),
                           ("targets down", "up{")):
        if metric not in alerting:
            problem(f"no alert watches {signal} ({metric})")
    # A job named outright must be produced; a pattern (the dashboard's `subs-.*`) must match one.
    produced = monitor_jobs()
    for job in sorted({j for e in expressions for m in re.findall(r'job=~?"([^"]+)"', e) for j in m.split("|")}):
        named = re.fullmatch(r"[A-Za-z0-9_-]+", job)
        if (job not in produced) if named else not any(re.fullmatch(job, p) for p in produced):
            problem(f"alerts.yml or the dashboard matches job {job!r}, which no ServiceMonitor/PodMonitor of "
                    f"deploy/k8s/monitoring produces ({sorted(produced)})")
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
    if not re.search(r"(?m)^COPY deploy/local/libmicrohttpd-patches /tmp/libmicrohttpd-patches$", build):
        problem("the Dockerfile's build stage does not give build-libmicrohttpd.sh its patches (deploy/local/libmicrohttpd-patches)")
    if re.search(r"\blibmicrohttpd(-dev|12)\b", dockerfile + install):
        problem("a Debian libmicrohttpd package is installed (bookworm's is 0.9.75; the pinned build replaces it)")
    if not re.search(r"(?m)^COPY --from=build \S*libmicrohttpd\.so\.12 /usr/local/lib/subs/", runtime):
        problem("the runtime stage does not ship the libmicrohttpd the build stage built")
def monitor_jobs() -> set[str]:
    """The `job` labels the monitoring folder's ServiceMonitor/PodMonitor give: their jobLabel's
    value on what they select (check_operations checks the selection exists and carries it)."""
    jobs = set()
    for file in (ROOT / "deploy" / "k8s" / "monitoring").glob("*monitor.yaml"):
        for o in yaml.safe_load_all(file.read_text()):
            label = o["spec"].get("jobLabel")
            value = o["spec"]["selector"].get("matchLabels", {}).get(label)
            if value:
                jobs.add(value)
    return jobs


def check_kubernetes(kubectl: str, validator: str) -> None:
    for folder in ("deploy/k8s/base", "deploy/k8s/monitoring", "deploy/k8s/overlays/example"):
        rendered = run([kubectl, "kustomize", str(ROOT / folder)], f"kubectl kustomize {folder}")
        if rendered is None:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
            file.write(rendered)
            file.flush()
            output = run([validator, "--strict", "--quiet", file.name], f"kubernetes-validate {folder}")
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        schemaless = {o["kind"] for o in objects if o["apiVersion"].startswith(("keda.sh/", "monitoring.coreos.com/"))}
        if output is not None and output.strip():
            # --quiet prints only warnings and failures; a missing schema is tolerated for KEDA's
            # and the Prometheus Operator's kinds alone.
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
    check_operations(folder, by_kind, config)


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_operations(folder: str, by_kind: dict[str, dict[str, dict]], config: dict) -> None:
    deployments = by_kind.get("Deployment", {})
    scaled = {o["spec"]["scaleTargetRef"]["name"] for kind in ("HorizontalPodAutoscaler", "ScaledObject")
              for o in by_kind.get(kind, {}).values()}
    grace = int(config.get("SHUTDOWN_GRACE_SECONDS", "20"))
    services = by_kind.get("Service", {})
    for name, deployment in deployments.items():
        if name in scaled and "replicas" in deployment["spec"]:
            problem(f"{folder}: Deployment {name} sets replicas although an autoscaler owns them (each apply resets it)")
        pod = deployment["spec"]["template"]
        labels = pod["metadata"].get("labels", {})
        behind = [s for s, o in services.items() if o["spec"].get("clusterIP") != "None" and selects(o["spec"].get("selector"), labels)]
        for c in pod["spec"]["containers"]:
            command = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            pause = float(command[-1]) if command[:1] == ["sleep"] else 0
            if behind and not pause:
                problem(f"{folder}: Deployment {name}/{c['name']} is behind Service {behind[0]} without a preStop pause")
            period = pod["spec"].get("terminationGracePeriodSeconds", 30)
            if period <= pause + grace:
                problem(f"{folder}: Deployment {name}: terminationGracePeriodSeconds {period} is not above preStop {pause} + SHUTDOWN_GRACE_SECONDS {grace}")
    if deployments:
        if config.get("MIGRATE_ON_START", "false").lower() != "false":
            problem(f"{folder}: the services migrate on start; the set-up Job alone must (MIGRATE_ON_START=false)")
        if not config.get("INGRESS_TRUSTED_PROXIES"):
            problem(f"{folder}: INGRESS_TRUSTED_PROXIES is not set: every client behind the load balancer counts as one source")
        if config.get("ADMIN_HTTP_HOST", "127.0.0.1").startswith("127."):
            problem(f"{folder}: ADMIN_HTTP_HOST keeps the admin listener on the pod's loopback, out of the Service's reach")
        admin = int(config.get("ADMIN_HTTP_PORT", "8082"))
        if not any(p.get("targetPort") == "admin" or p.get("port") == admin for o in services.values() for p in o["spec"]["ports"]):
            problem(f"{folder}: no Service exposes the admin port {admin}")
        for policy in by_kind.get("NetworkPolicy", {}).values():
            for rule in policy["spec"].get("ingress", []):
                if any(p.get("port") == admin for p in rule.get("ports", [])) and not rule.get("from"):
                    problem(f"{folder}: NetworkPolicy {policy['metadata']['name']} opens the admin port {admin} to everyone")
    for name, job in by_kind.get("Job", {}).items():
        pod = job["spec"]["template"]["spec"]
        if "subsctl migrate" not in json.dumps(pod["containers"]):
            problem(f"{folder}: Job {name} does not run subsctl migrate")
        mounted = [v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v]
        maps = by_kind.get("ConfigMap", {})
        if not any(m in maps for m in mounted):
            continue  # the base alone: the overlay generates the ConfigMap
        if name not in mounted or name not in maps or not re.fullmatch(r".+-[a-z0-9]{10}", name):
            problem(f"{folder}: Job {name} does not carry the hashed name of the ConfigMap it reads ({mounted}): "
                    "a changed release cannot be applied over the finished Job")
            continue
        tag = pod["containers"][0]["image"].rpartition(":")[2]
        if maps[name]["data"].get("release") != tag:
            problem(f"{folder}: ConfigMap {name} has release {maps[name]['data'].get('release')!r}, the Job runs image tag {tag!r}")
    pods = {n: d["spec"]["template"] for n, d in deployments.items()}
    for kind, targets in (("ServiceMonitor", services), ("PodMonitor", pods)):
        for name, monitor in by_kind.get(kind, {}).items():
            if not targets:
                continue  # the monitoring folder alone
            selector, label = monitor["spec"]["selector"].get("matchLabels", {}), monitor["spec"].get("jobLabel")
            chosen = [t for t in targets.values() if selects(selector, t["metadata"].get("labels", {}))]
            if not chosen or not label or not all(label in t["metadata"].get("labels", {}) for t in chosen):
                problem(f"{folder}: {kind} {name} selects nothing carrying its jobLabel {label!r}")
            endpoints = monitor["spec"].get("endpoints") or monitor["spec"].get("podMetricsEndpoints") or []
            for endpoint in endpoints:
                ports = [p.get("name") for t in chosen for p in (t["spec"]["ports"] if kind == "ServiceMonitor"
                         else [q for c in t["spec"]["containers"] for q in c.get("ports", [])])]
                if endpoint.get("port") not in ports:
                    problem(f"{folder}: {kind} {name} scrapes port {endpoint.get('port')!r}, which what it selects lacks")


def check_documentation() -> None:
    source = (ROOT / "Shared" / "ServiceRuntime" / "Configuration.swift").read_text()
    listed = re.search(r"secretSettings = \[(.*?)\]", source, re.S)
    secrets = re.findall(r'"([A-Z0-9_]+)"', listed.group(1)) if listed else []
    if not secrets:
        problem("ConfigurationReader.secretSettings not found")
    upgrading = (ROOT / "deploy" / "UPGRADING.md").read_text()
    for name in secrets:
        if f"`{name}_FILE`" not in upgrading:
            problem(f"deploy/UPGRADING.md does not document {name}_FILE")
    recipe = (ROOT / "deploy" / "k8s" / "overlays" / "example" / "kustomization.yaml").read_text()
    if "ADMIN_TOKENS" not in recipe:
        problem("the example overlay's Secret recipe lacks ADMIN_TOKENS")


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
    check_documentation()
    if problems:
        print(f"deployment check: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("deployment check: compose, libmicrohttpd pins, alerts (promtool), Kubernetes (kustomize, schemas) all pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
