//! `--auth=none` is only safe where nobody but the co-located client can connect: the start-up check.

use std::net::SocketAddr;

use super::AuthMode;

/// Why kache refuses to start with the requested auth mode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListenError {
    /// `--auth=none` on an address other machines can reach, without the explicit override.
    #[error(
        "--auth=none serves every client with kache's own upstream credentials; it is only allowed on a \
         loopback address (got {addr}); use --auth=delegated, or pass --auth-none-allow-non-loopback to \
         accept the risk"
    )]
    NonLoopback { addr: SocketAddr },
}

/// What the operator asked for, and what the check concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenCheck {
    /// Nothing to report.
    Ok,
    /// Allowed only because the operator forced it: log a warning.
    ForcedNonLoopback,
}

/// Checks the listen address against the auth mode (a pure function; `main` logs or refuses).
///
/// `--auth=delegated` may listen anywhere. `--auth=none` needs a loopback address (IPv4 127/8, IPv6 `::1`,
/// or an IPv4-mapped loopback) unless `allow_non_loopback` is set. An unspecified address (`0.0.0.0`,
/// `::`) listens on every interface and is not loopback.
pub fn check_listen(
    mode: AuthMode,
    addr: SocketAddr,
    allow_non_loopback: bool,
) -> Result<ListenCheck, ListenError> {
    match mode {
        AuthMode::Delegated => Ok(ListenCheck::Ok),
        AuthMode::None if is_loopback(addr) => Ok(ListenCheck::Ok),
        AuthMode::None if allow_non_loopback => Ok(ListenCheck::ForcedNonLoopback),
        AuthMode::None => Err(ListenError::NonLoopback { addr }),
    }
}

fn is_loopback(addr: SocketAddr) -> bool {
    match addr {
        SocketAddr::V4(a) => a.ip().is_loopback(),
        SocketAddr::V6(a) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("valid address")
    }

    #[test]
    fn none_is_allowed_on_loopback_only() {
        for ok in ["127.0.0.1:8080", "127.1.2.3:1", "[::1]:8080", "[::ffff:127.0.0.1]:80"] {
            assert_eq!(check_listen(AuthMode::None, addr(ok), false), Ok(ListenCheck::Ok), "{ok}");
        }
        for bad in ["0.0.0.0:8080", "10.0.0.1:8080", "[::]:8080", "[fe80::1]:8080", "[::ffff:10.0.0.1]:80"] {
            assert_eq!(
                check_listen(AuthMode::None, addr(bad), false),
                Err(ListenError::NonLoopback { addr: addr(bad) }),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_override_is_reported_so_main_can_warn() {
        assert_eq!(
            check_listen(AuthMode::None, addr("0.0.0.0:8080"), true),
            Ok(ListenCheck::ForcedNonLoopback)
        );
        assert_eq!(check_listen(AuthMode::None, addr("127.0.0.1:1"), true), Ok(ListenCheck::Ok));
    }

    #[test]
    fn delegated_listens_anywhere() {
        assert_eq!(check_listen(AuthMode::Delegated, addr("0.0.0.0:443"), false), Ok(ListenCheck::Ok));
    }
}
