//! The agent is the tunnel's gate (DESIGN §3b, #39): which address a stream the control plane
//! asks for may reach. Only a Pod of one of the agent's own workspaces, on a port that
//! workspace's config declares; never the apiserver, a node, the agent itself, a loopback,
//! link-local or metadata address, whatever the Pods' status says. A hostile control plane
//! gains nothing from the tunnel but the workspaces' declared ports.

use crate::agent::sync::pod_failures::owning_deployment;
use crate::agent::sync::workspace::WorkspaceKey;
use crate::tunnel::{OpenStream, StreamRefusal};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerPort, Pod, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What the agent knows of one workspace when a stream for it arrives, from its own watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceEndpoints {
    pub key: WorkspaceKey,
    /// Its Deployment carries the agent's label, in a namespace the agent owns: the apply
    /// rules' test of whose a workspace is.
    pub ours: bool,
    /// The ports its own config declares: its containers' ports and its Services' target ports.
    pub declared_ports: BTreeSet<u16>,
    /// The addresses of its Pods that are Ready, not on the host's network.
    pub pod_addresses: Vec<IpAddr>,
}

impl WorkspaceEndpoints {
    /// What a stream may reach of one workspace, from what the cluster holds: its Deployment
    /// (`ours`: it and its namespace are the agent's, as the apply rules judge), the
    /// Services of its namespace (those selecting its Pods count) and the Pods of its
    /// namespace (those its Deployment owns count).
    pub fn read(key: WorkspaceKey, ours: bool, deployment: &Deployment, services: &[Service], pods: &[Pod]) -> Self {
        let none = PodTemplateSpec::default();
        let template = deployment.spec.as_ref().map_or(&none, |s| &s.template);
        let template_labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
        let selects_ours = |service: &&Service| {
            let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
            selector.is_some_and(|selector| {
                !selector.is_empty() && selector.iter().all(|(k, v)| template_labels.and_then(|l| l.get(k)) == Some(v))
            })
        };
        let services: Vec<Service> = services.iter().filter(selects_ours).cloned().collect();
        let owned = |pod: &&Pod| {
            let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            pod.metadata.namespace.as_deref() == Some(key.namespace())
                && owning_deployment(owners, &labels).as_deref() == Some(key.name())
        };
        let pods: Vec<Pod> = pods.iter().filter(owned).cloned().collect();
        Self { declared_ports: declared_ports(template, &services), pod_addresses: pod_addresses(&pods), ours, key }
    }
}

/// Addresses the agent never dials, whatever a Pod's status claims: its own, the nodes', the
/// apiserver's and the `kubernetes` Service's (a hostNetwork Pod would name them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NeverDialled {
    addresses: BTreeSet<IpAddr>,
}

impl NeverDialled {
    /// Each address as the gate compares it (IPv4 however it is written).
    pub fn new(addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        Self { addresses: addresses.into_iter().map(canonical).collect() }
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        self.addresses.contains(&canonical(address))
    }
}

/// The address to dial for `request`, or why not.
pub fn dial(
    request: &OpenStream,
    endpoints: Option<&WorkspaceEndpoints>,
    never: &NeverDialled,
) -> Result<SocketAddr, StreamRefusal> {
    let endpoints = endpoints
        .filter(|e| e.ours && e.key.namespace() == request.namespace && e.key.name() == request.workspace)
        .ok_or(StreamRefusal::NotOurWorkspace)?;
    if !endpoints.declared_ports.contains(&request.port) {
        return Err(StreamRefusal::UndeclaredPort(request.port));
    }
    let mut refused = None;
    for &address in &endpoints.pod_addresses {
        let why = forbidden(address)
            .or_else(|| never.contains(address).then_some("the agent's, a node's or the apiserver's"));
        match why {
            None => return Ok(SocketAddr::new(canonical(address), request.port)),
            Some(why) => refused = refused.or(Some(StreamRefusal::ForbiddenAddress { address, why })),
        }
    }
    Err(refused.unwrap_or(StreamRefusal::NoPod))
}

/// An IPv4 address written as IPv6 is the IPv4 address, judged as one: mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), or through NAT64's well-known or local
/// prefix (`64:ff9b::a.b.c.d`, `64:ff9b:1::/48`), which an IPv6-only cluster routes to it.
fn canonical(address: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = address else { return address };
    let [a, b, c, d, e, f, g, h] = v6.segments();
    let [g1, g2] = g.to_be_bytes();
    let [h1, h2] = h.to_be_bytes();
    let embedded = IpAddr::V4(Ipv4Addr::new(g1, g2, h1, h2));
    let nat64 = [a, b, c, d, e, f] == [0x64, 0xff9b, 0, 0, 0, 0] || [a, b, c] == [0x64, 0xff9b, 1];
    let compatible = [a, b, c, d, e, f] == [0; 6] && (g != 0 || h > 1);
    if nat64 || compatible {
        return embedded;
    }
    v6.to_ipv4_mapped().map_or(address, IpAddr::V4)
}

/// The cloud metadata and platform services' well-known addresses besides 169.254.169.254:
/// AWS's IPv6, GCP's IPv6, Alibaba's, Azure's wire server, Oracle's older one.
const METADATA_V6: [Ipv6Addr; 2] =
    [Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254), Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254)];
const METADATA_V4: [Ipv4Addr; 3] =
    [Ipv4Addr::new(100, 100, 100, 200), Ipv4Addr::new(168, 63, 129, 16), Ipv4Addr::new(192, 0, 0, 192)];

/// Why an address is never a workspace Pod's, whatever the cluster says; None when it may be.
pub fn forbidden(address: IpAddr) -> Option<&'static str> {
    match canonical(address) {
        IpAddr::V4(v4) if v4.is_loopback() => Some("loopback"),
        IpAddr::V4(v4) if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() => Some("not a host"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local, where metadata services answer"),
        IpAddr::V4(v4) if METADATA_V4.contains(&v4) => Some("a metadata service"),
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some("not a host"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("loopback"),
        IpAddr::V6(v6) if v6.is_unspecified() || v6.is_multicast() => Some("not a host"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local"),
        IpAddr::V6(v6) if METADATA_V6.contains(&v6) => Some("a metadata service"),
        _ => None,
    }
}

/// The ports a workspace's own config declares: its Pod template's container ports, and its
/// Services' target ports (a named one resolved against those containers' port names).
pub fn declared_ports(template: &PodTemplateSpec, services: &[Service]) -> BTreeSet<u16> {
    let containers = template.spec.iter().flat_map(|spec| spec.containers.iter());
    let container_ports: Vec<&ContainerPort> = containers.flat_map(|c| c.ports.iter().flatten()).collect();
    let mut ports: BTreeSet<u16> =
        container_ports.iter().filter_map(|p| u16::try_from(p.container_port).ok()).filter(|p| *p != 0).collect();
    let service_ports = services.iter().filter_map(|s| s.spec.as_ref()).flat_map(|spec| spec.ports.iter().flatten());
    for port in service_ports {
        let target = match &port.target_port {
            Some(IntOrString::Int(number)) => u16::try_from(*number).ok(),
            Some(IntOrString::String(name)) => container_ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok()),
            // No targetPort: the Service's own port number.
            None => u16::try_from(port.port).ok(),
        };
        ports.extend(target.filter(|p| *p != 0));
    }
    ports
}

/// The addresses of a workspace's Pods a stream may go to: Ready, not on the host's network
/// (whose address is the node's), each of its `podIPs`.
pub fn pod_addresses(pods: &[Pod]) -> Vec<IpAddr> {
    let mut addresses = Vec::new();
    for pod in pods {
        if pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false) {
            continue;
        }
        let Some(status) = &pod.status else { continue };
        let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ips = status.pod_ips.iter().flatten().map(|ip| ip.ip.as_str());
        addresses.extend(ips.chain(status.pod_ip.as_deref()).filter_map(|ip| ip.parse::<IpAddr>().ok()));
    }
    addresses.sort();
    addresses.dedup();
    addresses
}

#[cfg(test)]
mod tests;
