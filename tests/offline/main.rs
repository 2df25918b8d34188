//! The offline tier, one binary: the protocol's contract between the halves, the checked-in
//! CRD, property tests of the apply policy, and the agent's control-plane client against a
//! local HTTP server, and the tunnel's transport in process. Nothing here needs a cluster or
//! a database.

mod control_plane_client;
mod crd;
mod devfile_properties;
mod policy_properties;
mod protocol;
mod tunnel;
