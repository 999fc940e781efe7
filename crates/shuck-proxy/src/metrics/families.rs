//! Which families the registry has, and their help texts: registered once, when the process's
//! `Metrics` is made.

use prometheus_client::registry::Registry;

use super::Metrics;

/// The families of connections, per frontend and worker: accepted, handshakes, how they ended.
pub(super) fn register_connection_families(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "connections_accepted",
        "TCP connections accepted",
        m.accepted.clone(),
    );
    registry.register(
        "connections_active",
        "Connections open now (handshaking or relaying)",
        m.active.clone(),
    );
    registry.register(
        "handshakes",
        "Completed TLS handshakes, by kind (full or resumed) and version",
        m.handshakes.clone(),
    );
    registry.register(
        "resumptions",
        "Resumed handshakes by mechanism: id (TLS 1.2 session ID), ticket (TLS 1.2 or 1.3), psk (TLS 1.3 stateful session)",
        m.resumptions.clone(),
    );
    registry.register(
        "handshake_failures",
        "Failed TLS handshakes, by reason",
        m.handshake_failures.clone(),
    );
    registry.register(
        "backend_errors",
        "Backend failures: no backend reachable (connect), error while relaying (relay), PROXY header not built (proxy_header), TLS handshake with it failed (tls); per frontend: no route (no_route), the route's TLS policy not the handshake's (policy_mismatch)",
        m.backend_errors.clone(),
    );
    registry.register(
        "client_errors",
        "Client-side errors while relaying (reset, broken TLS record)",
        m.client_errors.clone(),
    );
    registry.register(
        "idle_timeouts",
        "Connections closed by idle_timeout",
        m.idle_timeouts.clone(),
    );
    registry.register(
        "bytes",
        "Plaintext bytes relayed, by direction (up = client to backend)",
        m.bytes.clone(),
    );
    registry.register(
        "accept_errors",
        "accept() failures that forced a back-off (EMFILE, ENFILE, ENOBUFS)",
        m.accept_errors.clone(),
    );
    registry.register(
        "connections_pressured",
        "Connections accepted with 90% of max_connections taken, which got shorter handshake and idle timeouts (3 s, 30 s at most)",
        m.pressured.clone(),
    );
    registry.register(
        "proxy_headers",
        "PROXY headers received (accept_proxy), by command (proxy, or local for health checks)",
        m.proxy_headers.clone(),
    );
    registry.register(
        "proxy_header_errors",
        "Connections closed because of their PROXY header (accept_proxy), by reason",
        m.proxy_header_errors.clone(),
    );
    registry.register(
        "client_certificates_unverified",
        "Client certificates that did not verify and were passed on (client_auth = optional_no_ca)",
        m.client_certs_unverified.clone(),
    );
    registry.register(
        "ktls_connections",
        "Connections of frontends with ktls = true, by who protected their records after the handshake (kernel, or user_space where the kernel could not: no kTLS, TLS 1.2)",
        m.ktls.clone(),
    );
    registry.register(
        "resource_errors",
        "Connections closed because this process ran out of a resource, by kind (descriptors)",
        m.resource_errors.clone(),
    );
    registry.register(
        "refused",
        "Connections refused by the frontend's admission rules, by reason: denied (deny), not_allowed (outside allow), client_connections and client_handshakes (per_client), ja4 (deny_ja4), overload (a new full handshake shed by a worker past overload_threshold), evicted_idle (an idle connection closed to free a slot near max_connections)",
        m.refused.clone(),
    );
}

/// The two latencies operators ask of a terminator first, as histograms, and the addresses
/// listened on.
pub(super) fn register_latencies_and_listeners(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "listener_info",
        "The addresses each frontend listens on now (always 1)",
        m.listeners.clone(),
    );
    register_backend_watch(registry, m);
    registry.register(
        "handshake_duration_seconds",
        "From accept to the end of the TLS handshake (the access log's handshake_ms: the PROXY header and the ClientHello's arrival included), by kind (full or resumed)",
        m.handshake_duration.clone(),
    );
    registry.register(
        "backend_connect_duration_seconds",
        "Connect to the backend that answered, from its attempt's start, by route (default: the frontend's own backends)",
        m.backend_connect_duration.clone(),
    );
}

/// The families of session resumption: the process cache and the remote store.
pub(super) fn register_session_families(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "session_cache_lookups",
        "Lookups in the per-process session cache (TLS 1.2 session IDs, TLS 1.3 stateful sessions), by result (hit, or miss: unknown or expired)",
        m.session_cache.clone(),
    );
    registry.register(
        "session_cache_evictions",
        "Sessions the per-process session cache dropped to stay within session_cache_size",
        m.session_cache_evictions.clone(),
    );
    registry.register(
        "session_store_lookups",
        "Lookups in the remote session store (session_store) made in the ClientHello stage, by result: hit, miss, timeout, error, garbage (a value that did not unseal), oversized (a reply over 64 KiB: the connection is ended), skipped (breaker open)",
        m.store_lookups.clone(),
    );
    registry.register(
        "session_store_writes",
        "Sessions written to the remote store, by result: written, dropped (queue full or store unavailable), error",
        m.store_writes.clone(),
    );
    registry.register(
        "session_store_latency_seconds",
        "Round trip of remote session store lookups",
        m.store_latency.clone(),
    );
    registry.register(
        "session_store_breaker_open",
        "1 while a worker skips the remote session store after repeated failures",
        m.store_breaker_open.clone(),
    );
}

/// The labels of one backend of one route of one frontend.
/// The gauges and counters of what watches the backends: health checks and DNS.
fn register_backend_watch(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "backend_up",
        "1 while the active health checks (health_check) have a backend up, 0 while down; only checked backends",
        m.backend_up.clone(),
    );
    registry.register(
        "backend_admin_state",
        "What an operator set for a backend through the admin socket: 0 enabled, 1 drain (no new connections), 2 disabled (open ones closed too); only backends an operator named",
        m.backend_admin_state.clone(),
    );
    registry.register(
        "dns_lookups",
        "Lookups of host-name backends, by name and result (ok; failed, empty, or refused: every address refused; the last good answer stays in use)",
        m.dns.lookups.clone(),
    );
    registry.register(
        "dns_addresses",
        "The addresses a host-name backend resolves to now, each a member of its pools",
        m.dns.addresses.clone(),
    );
    registry.register(
        "dns_refused_addresses",
        "Addresses DNS answers for a host-name backend named and that were not used: unspecified, multicast, broadcast; loopback, link-local and metadata unless dns_allow_special_addresses",
        m.dns.refused.clone(),
    );
}
