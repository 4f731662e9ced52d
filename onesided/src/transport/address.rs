//! Which address of this host the network endpoint binds to.
//!
//! A provider lists every interface (`fi_getinfo` names eth0 before lo here), so the
//! endpoint never takes the first one it is offered: it binds to an address chosen here, in
//! this order:
//!
//! 1. `ONESIDED_NET_ADDR`: an address of this host, as given;
//! 2. `ONESIDED_IFACE`: the IPv4 address of that interface (an error if it has none);
//! 3. the first interface that is up, not the loopback, and has an IPv4 address: the one a
//!    host's peers reach it on (in a network namespace, its veth);
//! 4. the loopback, when there is no such interface.
//!
//! `osrun --nodes K` without node agents starts the ranks of every virtual node itself, in its
//! own network namespace: they meet on the loopback, and it sets `ONESIDED_NET_ADDR=127.0.0.1`
//! for them unless the environment names an address or an interface already. Node agents
//! (`osrun --node-wrapper`) leave the choice to the rules above.

// The launcher uses the variables' names; the choice itself serves the network endpoint
// (feature `ofi`) and is unit-tested without it too.
#![cfg_attr(not(feature = "ofi"), allow(dead_code))]

use std::net::Ipv4Addr;

use crate::error::{Error, Result};

/// The environment variable naming the address the endpoint binds to.
pub(crate) const ENV_NET_ADDR: &str = "ONESIDED_NET_ADDR";
/// The environment variable naming the interface whose address the endpoint binds to.
pub(crate) const ENV_IFACE: &str = "ONESIDED_IFACE";

/// The address the network endpoint binds to (see the module docs).
pub(crate) fn endpoint_address() -> Result<String> {
    if let Ok(addr) = std::env::var(ENV_NET_ADDR) {
        return Ok(addr);
    }
    if let Ok(iface) = std::env::var(ENV_IFACE) {
        return interface_ipv4(&iface)?
            .map(|a| a.to_string())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{ENV_IFACE}={iface}: no such interface with an IPv4 address here"
                ))
            });
    }
    Ok(first_external_ipv4()?
        .unwrap_or(Ipv4Addr::LOCALHOST)
        .to_string())
}

/// (interface, IPv4 address, up, loopback) of every IPv4 address of this host.
fn ipv4_interfaces() -> Result<Vec<(String, Ipv4Addr, bool, bool)>> {
    use nix::net::if_::InterfaceFlags;
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| Error::Bootstrap(format!("cannot list the network interfaces: {e}")))?;
    Ok(addrs
        .filter_map(|a| {
            let ip = a.address.as_ref()?.as_sockaddr_in()?.ip();
            Some((
                a.interface_name,
                ip,
                a.flags.contains(InterfaceFlags::IFF_UP),
                a.flags.contains(InterfaceFlags::IFF_LOOPBACK),
            ))
        })
        .collect())
}

/// The IPv4 address of interface `name`, if it has one.
fn interface_ipv4(name: &str) -> Result<Option<Ipv4Addr>> {
    Ok(ipv4_interfaces()?
        .into_iter()
        .find(|(n, ..)| n == name)
        .map(|(_, ip, ..)| ip))
}

/// The first IPv4 address of an interface that is up and not the loopback.
fn first_external_ipv4() -> Result<Option<Ipv4Addr>> {
    Ok(ipv4_interfaces()?
        .into_iter()
        .find(|&(_, _, up, loopback)| up && !loopback)
        .map(|(_, ip, ..)| ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_has_its_address() {
        let lo = ipv4_interfaces()
            .unwrap()
            .into_iter()
            .find(|(_, _, _, loopback)| *loopback)
            .expect("a loopback interface");
        assert_eq!(interface_ipv4(&lo.0).unwrap(), Some(Ipv4Addr::LOCALHOST));
        assert_eq!(interface_ipv4("no-such-interface0").unwrap(), None);
        if let Some(ip) = first_external_ipv4().unwrap() {
            assert!(!ip.is_loopback());
        }
    }
}
