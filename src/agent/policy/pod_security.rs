//! The Pod Security Standards, Baseline and Restricted
//! (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>, as of v1.34), checked by
//! the agent itself on every Pod template in a workspace's config. Pod Security admission is on by
//! default only from Kubernetes 1.23, and acts only where a namespace is labelled; an older
//! apiserver (CI runs 1.20), or one without the plugin, would take a privileged pod as it is. The
//! checks read the config's JSON, so a field of the wrong type is a violation, never a panic.
//!
//! Annotations are the field policy's (`field_policy::check_pod_metadata`: AppArmor and seccomp
//! annotations must name a confined profile). Left out, on the strict side: Restricted's
//! relaxations for `spec.os.name: windows` and `hostUsers: false`, which older apiservers and
//! kubelets do not honour.
//!
//! Longer than 400 lines: the standard has fifteen controls over the pod and three container
//! lists, every field is read defensively, and each control has a test.

use serde_json::Value;

/// Capabilities Baseline lets a container add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
/// The "safe" sysctls as the standard's page lists them (PSA from 1.32 also admits
/// `net.ipv4.tcp_rmem`/`tcp_wmem`, which the page does not, and older kubelets would refuse).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SELINUX_TYPES: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];
/// Allowed seccomp and AppArmor profile types (Restricted also requires a seccomp one).
const PROFILE_TYPES: &[&str] = &["RuntimeDefault", "Localhost"];
const RESTRICTED_VOLUMES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
/// Violations named in full in one message; the rest are only counted.
const MAX_SHOWN: usize = 10;

/// A Pod Security Standard level the agent enforces. Privileged is none: the agent never allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodSecurityLevel {
    #[default]
    Baseline,
    Restricted,
}

impl PodSecurityLevel {
    /// The level's name, as in a `pod-security.kubernetes.io/enforce` label.
    pub fn label_value(self) -> &'static str {
        match self {
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

impl std::str::FromStr for PodSecurityLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            "privileged" => {
                Err("Pod Security level \"privileged\" is never allowed: use \"baseline\" or \"restricted\"".into())
            }
            other => Err(format!("unknown Pod Security level {other:?}: expected \"baseline\" or \"restricted\"")),
        }
    }
}

impl std::fmt::Display for PodSecurityLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label_value())
    }
}

/// The Pod spec inside an object of a known pod-bearing kind, with its JSON path for messages:
/// core `Pod` → `spec`; apps `Deployment`/`StatefulSet`/`DaemonSet`/`ReplicaSet`, core
/// `ReplicationController`, batch `Job` → `spec.template.spec`; batch `CronJob` →
/// `spec.jobTemplate.spec.template.spec`; core `PodTemplate` → `template.spec` (Pod Security
/// admission checks it too). None for other kinds. A known kind whose spec is missing or not an
/// object still gets Some (`Null` or the garbage), so that [`check`] rejects it.
pub fn pod_spec<'a>(group: &str, kind: &str, data: &'a Value) -> Option<(&'static str, &'a Value)> {
    let path = match (group, kind) {
        ("", "Pod") => "spec",
        ("", "PodTemplate") => "template.spec",
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job") => "spec.template.spec",
        ("batch", "CronJob") => "spec.jobTemplate.spec.template.spec",
        _ => return None,
    };
    // Indexing a Value by key never panics: a missing key or a non-object gives Null.
    Some((path, path.split('.').fold(data, |value, key| &value[key])))
}

/// Check one Pod spec against `level`. The error names each violating field by its path below
/// `path_prefix` (e.g. `spec.template.spec.hostPID: true is not allowed at baseline`), joined
/// with "; ", the first ten in full.
pub fn check(level: PodSecurityLevel, path_prefix: &str, pod_spec: &Value) -> Result<(), String> {
    let mut out = Violations::default();
    if !pod_spec.is_object() {
        out.push(if path_prefix.is_empty() { "spec" } else { path_prefix }, "must be an object");
        return out.into_result();
    }
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        out.forbid_true(&pod_spec[field], &at(path_prefix, field));
    }
    let sc_path = at(path_prefix, "securityContext");
    let sc = out.object(&pod_spec["securityContext"], &sc_path);
    check_security_context(&mut out, sc, &sc_path);
    let sysctls_path = at(&sc_path, "sysctls");
    for (i, sysctl) in out.array(&sc["sysctls"], &sysctls_path).iter().enumerate() {
        let path = format!("{sysctls_path}[{i}]");
        let Some(sysctl) = out.element(sysctl, &path) else { continue };
        let name_path = at(&path, "name");
        if let Some(name) = out.string(&sysctl["name"], &name_path)
            && !SAFE_SYSCTLS.contains(&name)
        {
            out.push(&name_path, format!("{name:?} is not allowed at baseline"));
        }
    }
    let restricted = level == PodSecurityLevel::Restricted;
    let volumes_path = at(path_prefix, "volumes");
    for (i, volume) in out.array(&pod_spec["volumes"], &volumes_path).iter().enumerate() {
        let path = format!("{volumes_path}[{i}]");
        let Some(sources) = out.element(volume, &path).and_then(Value::as_object) else { continue };
        // A volume with no source is defaulted to emptyDir, so only the sources present count.
        for (source, _) in sources.iter().filter(|(key, value)| *key != "name" && !value.is_null()) {
            if source == "hostPath" {
                out.push(&at(&path, source), "hostPath volumes are not allowed at baseline");
            } else if restricted && !RESTRICTED_VOLUMES.contains(&source.as_str()) {
                out.push(&at(&path, source), format!("{source} volumes are not allowed at restricted"));
            }
        }
    }
    if restricted {
        let path = at(&sc_path, "runAsNonRoot");
        match &sc["runAsNonRoot"] {
            Value::Null | Value::Bool(true) => {}
            Value::Bool(false) => out.push(&path, "false is not allowed at restricted"),
            _ => out.push(&path, "must be a boolean"),
        }
        forbid_root(&mut out, &sc["runAsUser"], &at(&sc_path, "runAsUser"));
    }
    let pod = PodLevel {
        security_context: &sc_path,
        restricted,
        non_root: sc["runAsNonRoot"].as_bool() == Some(true),
        seccomp: sc["seccompProfile"]["type"].as_str().is_some_and(|t| PROFILE_TYPES.contains(&t)),
    };
    for list in CONTAINER_LISTS {
        let list_path = at(path_prefix, list);
        for (i, container) in out.array(&pod_spec[list], &list_path).iter().enumerate() {
            let path = format!("{list_path}[{i}]");
            if let Some(container) = out.element(container, &path) {
                check_container(&mut out, &pod, container, &path);
            }
        }
    }
    out.into_result()
}

/// What the container checks need from the pod level.
struct PodLevel<'a> {
    security_context: &'a str,
    restricted: bool,
    /// The pod sets `runAsNonRoot: true`, so containers may leave it unset.
    non_root: bool,
    /// The pod sets an allowed seccomp profile, so containers may leave it unset.
    seccomp: bool,
}

/// The Baseline fields a pod's and a container's securityContext share.
fn check_security_context(out: &mut Violations, sc: &Value, path: &str) {
    let windows_path = at(path, "windowsOptions");
    let windows = out.object(&sc["windowsOptions"], &windows_path);
    out.forbid_true(&windows["hostProcess"], &at(&windows_path, "hostProcess"));
    let selinux_path = at(path, "seLinuxOptions");
    let selinux = out.object(&sc["seLinuxOptions"], &selinux_path);
    let type_path = at(&selinux_path, "type");
    if let Some(selinux_type) = out.string(&selinux["type"], &type_path)
        && !SELINUX_TYPES.contains(&selinux_type)
    {
        out.push(&type_path, format!("{selinux_type:?} is not allowed at baseline"));
    }
    for field in ["user", "role"] {
        let field_path = at(&selinux_path, field);
        if out.string(&selinux[field], &field_path).is_some_and(|value| !value.is_empty()) {
            out.push(&field_path, "must not be set at baseline");
        }
    }
    for profile in ["seccompProfile", "appArmorProfile"] {
        let profile_path = at(path, profile);
        let profile = out.object(&sc[profile], &profile_path);
        let type_path = at(&profile_path, "type");
        if let Some(profile_type) = out.string(&profile["type"], &type_path)
            && !PROFILE_TYPES.contains(&profile_type)
        {
            out.push(&type_path, format!("{profile_type:?} is not allowed at baseline"));
        }
    }
}

fn check_container(out: &mut Violations, pod: &PodLevel<'_>, container: &Value, path: &str) {
    let sc_path = at(path, "securityContext");
    let sc = out.object(&container["securityContext"], &sc_path);
    check_security_context(out, sc, &sc_path);
    out.forbid_true(&sc["privileged"], &at(&sc_path, "privileged"));
    let proc_path = at(&sc_path, "procMount");
    if let Some(proc_mount) = out.string(&sc["procMount"], &proc_path)
        && proc_mount != "Default"
    {
        out.push(&proc_path, format!("{proc_mount:?} is not allowed at baseline"));
    }
    let caps_path = at(&sc_path, "capabilities");
    let caps = out.object(&sc["capabilities"], &caps_path);
    let add_path = at(&caps_path, "add");
    for (i, cap) in out.array(&caps["add"], &add_path).iter().enumerate() {
        let cap_path = format!("{add_path}[{i}]");
        match cap.as_str() {
            None => out.push(&cap_path, "must be a string"),
            Some(c) if !BASELINE_CAPABILITIES.contains(&c) => {
                out.push(&cap_path, format!("{c:?} is not allowed at baseline"))
            }
            Some(c) if pod.restricted && c != "NET_BIND_SERVICE" => {
                out.push(&cap_path, format!("{c:?} is not allowed at restricted"))
            }
            Some(_) => {}
        }
    }
    let ports_path = at(path, "ports");
    for (i, port) in out.array(&container["ports"], &ports_path).iter().enumerate() {
        let port_path = format!("{ports_path}[{i}]");
        let Some(port) = out.element(port, &port_path) else { continue };
        let host_port_path = at(&port_path, "hostPort");
        match &port["hostPort"] {
            Value::Null => {}
            Value::Number(n) if n.as_i64() == Some(0) => {}
            Value::Number(n) if n.is_i64() || n.is_u64() => {
                out.push(&host_port_path, format!("{n} is not allowed at baseline"))
            }
            _ => out.push(&host_port_path, "must be an integer"),
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        check_handler_host(out, &container[probe], &at(path, probe));
    }
    let lifecycle_path = at(path, "lifecycle");
    let lifecycle = out.object(&container["lifecycle"], &lifecycle_path);
    for hook in ["postStart", "preStop"] {
        check_handler_host(out, &lifecycle[hook], &at(&lifecycle_path, hook));
    }

    if !pod.restricted {
        return;
    }
    let escalation_path = at(&sc_path, "allowPrivilegeEscalation");
    match &sc["allowPrivilegeEscalation"] {
        Value::Bool(false) => {}
        Value::Bool(true) => out.push(&escalation_path, "true is not allowed at restricted"),
        Value::Null => out.push(&escalation_path, "must be set to false at restricted"),
        _ => out.push(&escalation_path, "must be a boolean"),
    }
    let non_root_path = at(&sc_path, "runAsNonRoot");
    match &sc["runAsNonRoot"] {
        Value::Bool(true) => {}
        Value::Null if pod.non_root => {}
        Value::Null => {
            out.push(&non_root_path, format!("must be true, here or in {}, at restricted", pod.security_context))
        }
        Value::Bool(false) => out.push(&non_root_path, "false is not allowed at restricted"),
        _ => out.push(&non_root_path, "must be a boolean"),
    }
    forbid_root(out, &sc["runAsUser"], &at(&sc_path, "runAsUser"));
    // A set but disallowed type was reported as Baseline; here only a missing one counts.
    if !pod.seccomp && sc["seccompProfile"]["type"].is_null() {
        let message =
            format!("must be RuntimeDefault or Localhost, here or in {}, at restricted", pod.security_context);
        out.push(&at(&sc_path, "seccompProfile.type"), message);
    }
    if !caps["drop"].as_array().is_some_and(|drop| drop.iter().any(|c| c.as_str() == Some("ALL"))) {
        out.push(&at(&caps_path, "drop"), "must include \"ALL\" at restricted");
    }
}

/// A probe's or lifecycle hook's httpGet or tcpSocket must not name a host (Baseline from v1.34):
/// the kubelet, not the pod, makes that connection.
fn check_handler_host(out: &mut Violations, handler: &Value, path: &str) {
    let handler = out.object(handler, path);
    for action in ["httpGet", "tcpSocket"] {
        let action_path = at(path, action);
        let action_value = out.object(&handler[action], &action_path);
        let host_path = at(&action_path, "host");
        if let Some(host) = out.string(&action_value["host"], &host_path)
            && !host.is_empty()
        {
            out.push(&host_path, format!("{host:?} is not allowed at baseline"));
        }
    }
}

/// Restricted: `runAsUser` may be anything but 0.
fn forbid_root(out: &mut Violations, value: &Value, path: &str) {
    if value.as_i64() == Some(0) {
        out.push(path, "0 is not allowed at restricted");
    } else if !(value.is_null() || value.is_i64() || value.is_u64()) {
        out.push(path, "must be an integer");
    }
}

fn at(prefix: &str, field: &str) -> String {
    if prefix.is_empty() { field.to_string() } else { format!("{prefix}.{field}") }
}

/// Read in place of a field of the wrong type, once it has been reported.
static NULL: Value = Value::Null;

/// The violations found so far; also reads typed fields, reporting wrong types.
#[derive(Default)]
struct Violations {
    shown: Vec<String>,
    more: usize,
}

impl Violations {
    fn push(&mut self, path: &str, problem: impl std::fmt::Display) {
        if self.shown.len() < MAX_SHOWN {
            self.shown.push(format!("{path}: {problem}"));
        } else {
            self.more = self.more.saturating_add(1);
        }
    }

    fn into_result(self) -> Result<(), String> {
        if self.shown.is_empty() {
            return Ok(());
        }
        let mut message = self.shown.join("; ");
        if self.more > 0 {
            message.push_str(&format!("; and {} more", self.more));
        }
        Err(message)
    }

    /// `value` if it is an object or absent; anything else is reported and read as absent.
    fn object<'a>(&mut self, value: &'a Value, path: &str) -> &'a Value {
        if value.is_object() || value.is_null() {
            value
        } else {
            self.push(path, "must be an object");
            &NULL
        }
    }

    /// A list element, which must be an object.
    fn element<'a>(&mut self, value: &'a Value, path: &str) -> Option<&'a Value> {
        if value.is_object() {
            Some(value)
        } else {
            self.push(path, "must be an object");
            None
        }
    }

    fn array<'a>(&mut self, value: &'a Value, path: &str) -> &'a [Value] {
        match value {
            Value::Array(items) => items.as_slice(),
            Value::Null => &[],
            _ => {
                self.push(path, "must be an array");
                &[]
            }
        }
    }

    fn string<'a>(&mut self, value: &'a Value, path: &str) -> Option<&'a str> {
        match value {
            Value::String(s) => Some(s.as_str()),
            Value::Null => None,
            _ => {
                self.push(path, "must be a string");
                None
            }
        }
    }

    /// Baseline: a flag that must be unset or false.
    fn forbid_true(&mut self, value: &Value, path: &str) {
        match value {
            Value::Null | Value::Bool(false) => {}
            Value::Bool(true) => self.push(path, "true is not allowed at baseline"),
            _ => self.push(path, "must be a boolean"),
        }
    }
}

#[cfg(test)]
mod tests;
