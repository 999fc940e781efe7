//! TLS: certificates, SNI selection, protocol parameters, and the rustls server configuration
//! for each frontend.

pub(crate) mod added;
mod backend_sessions;
pub(crate) mod backend_tls;
pub(crate) mod certs;
pub(crate) mod client_auth;
pub(crate) mod handshake;
pub mod pkcs11;
pub(crate) mod sni;
pub(crate) mod stream;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::ServerConfig;

use crate::certs::acme::on_demand::{OnDemandCerts, OnDemandEvents};
use crate::config::{Acme, CertSource, Frontend, OcspMode, SniFallback, UntilIssued};
use crate::error::{Error, Result};
use crate::sessions::cache::{SessionCache, SessionCounters};
use crate::sessions::remote::{RemoteSessions, Resumes};
use crate::sessions::{resumption, ticket_keys, tickets};
use crate::store::{SharedStore, StoreCounters, Target};
use certs::LoadedCert;
use sni::{SniResolver, WorkerResolver};

/// What a frontend's TLS keeps from one load to the next (a reload): the ticket keys, so tickets
/// issued before still resume, and the session cache.
#[derive(Debug, Default, Clone)]
pub(crate) struct Carried {
    /// Random ticket keys (keys from files are read again instead).
    pub ticketer: Option<Arc<tickets::Ticketer>>,
    pub sessions: Option<Arc<SessionCache>>,
    /// The remote session store, kept while its settings are unchanged (its connections stay).
    pub store: Option<Arc<SharedStore>>,
    /// What a new remote store counts into.
    pub store_counters: StoreCounters,
    /// With `on_demand`: the certificates issued so far (kept across reloads, like the cache).
    pub on_demand: Option<Arc<OnDemandCerts>>,
}

/// One worker's TLS configuration for one frontend. Only the main thread stores into it (on
/// reload); the worker loads it once per connection, which is an uncontended reference-count bump.
pub(crate) type TlsSlot = Arc<arc_swap::ArcSwap<WorkerTls>>;

/// What a worker serves one frontend's handshakes with.
#[derive(Debug)]
pub(crate) struct WorkerTls {
    pub config: Arc<ServerConfig>,
    /// `config`'s certificate resolver, this worker's own: it notes which certificate rustls
    /// chose for the handshake being started, so the connection learns what it serves.
    pub(crate) resolver: Arc<WorkerResolver>,
    /// `client_auth = "optional_no_ca"`: the check whose result the backend is told.
    pub client_check: Option<Arc<client_auth::Lenient>>,
    /// With a remote session store: this worker's storage, which the ClientHello stage fills.
    pub(crate) remote: Option<Arc<RemoteSessions>>,
    /// This worker's view of the ticket keys and session storage (notes what resumed).
    pub(crate) resumption: Arc<resumption::WorkerResumption>,
    /// The routes' own TLS policies, in file order: a ClientHello asking for one of a route's
    /// names is served with its configuration (the first that matches).
    pub(crate) by_name: Vec<(Vec<String>, Arc<WorkerTls>)>,
    /// Whose policy this is: the route's place in the frontend's `route` list; `None`: the
    /// frontend's.
    pub(crate) policy: Option<usize>,
    /// `client_auth = "required"`: a handshake without a client certificate is refused, a
    /// resumed one too (rustls does not ask again when it resumes).
    pub(crate) requires_client_cert: bool,
    /// TLS to the backends, by route (`default`: the frontend's own), with this worker's own
    /// session cache.
    pub(crate) backend_tls: Vec<(String, Arc<rustls::ClientConfig>)>,
}

impl WorkerTls {
    /// The client configuration for `route`'s backends, when they are reached in TLS.
    pub(crate) fn backend_client(&self, route: &str) -> Option<Arc<rustls::ClientConfig>> {
        self.backend_tls
            .iter()
            .find(|(r, _)| r == route)
            .map(|(_, c)| c.clone())
    }

    /// Whether a handshake for `sni` may sign with a key in a PKCS#11 token, and must then be
    /// processed off the worker (see `handshake::finish`).
    pub(crate) fn signs_in_token(&self, sni: Option<&str>) -> bool {
        self.resolver.tables().may_sign_in_token(sni)
    }

    /// This configuration with a resolver and a resumption view of one handshake's own: the
    /// worker's note what the one handshake it processes at a time chose and found, and a
    /// handshake processed on another thread would mix its notes with theirs. A copy of the
    /// configuration per such handshake: made only for keys in tokens, whose signature costs
    /// far more.
    pub(crate) fn offloaded(&self) -> Offloaded {
        let mut c = (*self.config).clone();
        let resolver = Arc::new(WorkerResolver::new(self.resolver.tables().clone()));
        c.cert_resolver = resolver.clone();
        // The remote store's slot too: the prefetched session is this handshake's.
        let remote = self.remote.as_ref().map(|r| Arc::new(r.with_own_slot()));
        let sessions = remote
            .clone()
            .map(|r| r as Arc<dyn rustls::server::StoresServerSessions>);
        let resumption = Arc::new(self.resumption.fresh(sessions));
        c.ticketer = resumption.clone();
        c.session_storage = resumption.clone();
        Offloaded {
            config: Arc::new(c),
            resolver,
            resumption,
            remote,
        }
    }

    /// The configuration a ClientHello asking for `sni` is served with.
    pub(crate) fn for_name(&self, sni: Option<&str>) -> &WorkerTls {
        let Some(name) = sni else {
            return self;
        };
        // As the certificate is chosen: one trailing dot is the same name.
        let name = name.strip_suffix('.').unwrap_or(name);
        self.by_name
            .iter()
            .find(|(names, _)| names.iter().any(|p| crate::config::name_matches(p, name)))
            .map_or(self, |(_, tls)| tls)
    }
}

/// One handshake's configuration, resolver and resumption view (see [`WorkerTls::offloaded`]).
pub(crate) struct Offloaded {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) resolver: Arc<WorkerResolver>,
    pub(crate) resumption: Arc<resumption::WorkerResumption>,
    pub(crate) remote: Option<Arc<RemoteSessions>>,
}

/// A route's own TLS policy, loaded: its configuration template and client-certificate check.
#[derive(Debug)]
struct Policy {
    /// The route's place in the frontend's `route` list.
    route: usize,
    sni: Vec<String>,
    template: ServerConfig,
    client_check: Option<Arc<client_auth::Lenient>>,
    required: bool,
}

/// Everything TLS a frontend needs, loaded and checked once at start.
#[derive(Debug)]
pub(crate) struct TlsContext {
    pub certs: Vec<LoadedCert>,
    template: ServerConfig,
    resolver: Arc<SniResolver>,
    /// The ticket keys, when tickets are on (shared by every worker's configuration).
    pub ticketer: Option<Arc<tickets::Ticketer>>,
    /// The frontend's session cache, shared by every worker's configuration.
    pub sessions: Arc<SessionCache>,
    /// The remote session store, when `session_store` is set.
    pub store: Option<Arc<SharedStore>>,
    /// What remote sessions are bound to (names, client trust) and how long they live.
    resumes: Resumes,
    /// Digest of the client-certificate trust (mode, CA, CRLs; the routes' too); `None` without
    /// client_auth anywhere.
    pub client_trust: Option<[u8; 32]>,
    client_check: Option<Arc<client_auth::Lenient>>,
    /// The routes' own TLS policies, in file order.
    policies: Vec<Policy>,
    /// The frontend's `client_auth = "required"`.
    requires_client_cert: bool,
    /// TLS to the backends, by route (`default`: the frontend's own).
    backend_tls: Vec<(String, Arc<rustls::ClientConfig>)>,
    /// With `on_demand`: the certificates issued at handshakes, and the way to ask for one.
    pub(crate) on_demand: Option<Arc<OnDemandCerts>>,
}

pub(crate) fn provider_for(fe: &Frontend) -> CryptoProvider {
    CryptoProvider {
        cipher_suites: fe.tls.ciphersuites.to_vec(),
        kx_groups: fe.tls.groups.to_vec(),
        ..rustls::crypto::aws_lc_rs::default_provider()
    }
}

/// The certificate an ACME frontend serves: the one issued last, when the state directory holds
/// one that covers the names and has not expired; otherwise a temporary self-signed one. A stored
/// bundle that cannot be read is reported and replaced by the next order, never fatal.
fn acme_certificate(acme: &Acme, provider: &CryptoProvider) -> Result<(LoadedCert, bool)> {
    const TEMPORARY: &str = "serving a temporary certificate until the next one is issued";
    if acme.bundle.exists() {
        match certs::load_bundle(&acme.bundle, provider) {
            Ok(c) if covers(&c, &acme.names) && c.not_after > crate::sys::clock::unix_now() => {
                return Ok((c, false));
            }
            Ok(_) => {
                let path = acme.bundle.display();
                tracing::info!(%path, "stored ACME certificate expired or for other names; {TEMPORARY}");
            }
            Err(e) => {
                tracing::warn!(error = %e, "stored ACME certificate unusable; {TEMPORARY}");
            }
        }
    }
    if acme.until_issued == UntilIssued::Refuse {
        // A certificate for a name no client asks for, and SNI fallbacks that refuse: every
        // handshake is refused until the real one is issued (ACME validators are answered
        // before any certificate is chosen).
        let nobody = ["pending.acme.invalid".to_string()];
        return Ok((certs::acme_temporary(&nobody, provider)?, true));
    }
    if acme.names.is_empty() {
        // On demand alone: clients without a name (or one not allowed yet) see this one.
        let placeholder = ["on-demand.invalid".to_string()];
        return Ok((certs::acme_temporary(&placeholder, provider)?, false));
    }
    Ok((certs::acme_temporary(&acme.names, provider)?, false))
}

/// Staples `cert`'s OCSP response when one is found and passes every check (`ocsp::verify`):
/// with `ocsp = "fetch"` the last one fetched (in `state_dir`), then `<certificate file>.ocsp`.
/// A response that fails is not stapled, with one line saying why; none found, nothing said.
fn staple(cert: &mut LoadedCert, fe: &Frontend) {
    let chain = &cert.certified.cert;
    let mut candidates = Vec::with_capacity(2);
    if fe.ocsp == OcspMode::Fetch {
        candidates.push(crate::certs::ocsp::staple_path(&fe.state_dir, &chain[0]));
    }
    let mut file = cert.path.clone().into_os_string();
    file.push(".ocsp");
    candidates.push(file.into());
    let now = crate::sys::clock::unix_now();
    for path in candidates.iter().filter(|p| p.exists()) {
        let checked = match (crate::sys::files::read(path), chain.get(1)) {
            (Err(e), _) => Err(e.to_string()),
            (Ok(_), None) => Err("the certificate file holds no issuer to check it against".into()),
            (Ok(der), Some(issuer)) => crate::certs::ocsp::verify(&der, &chain[0], issuer, now)
                .map(|v| (der, v))
                .map_err(|e| e.to_string()),
        };
        match checked {
            Ok((der, verified)) => {
                let mut key = (*cert.certified).clone();
                key.ocsp = Some(der);
                cert.certified = Arc::new(key);
                cert.staple = Some(verified);
                return;
            }
            Err(error) => {
                tracing::warn!(frontend = %fe.name, path = %path.display(), %error, "OCSP response not stapled");
            }
        }
    }
}

/// Whether a certificate names every one of `names` (exactly: ACME orders no wildcards).
pub(crate) fn covers(cert: &LoadedCert, names: &[String]) -> bool {
    names.iter().all(|n| cert.names.contains(n))
}

impl TlsContext {
    /// Loads and checks a frontend's certificates and TLS settings, with a new ticket key and an
    /// empty session cache whose counters nobody reads (`shuck check`).
    pub(crate) fn load(fe: &Frontend) -> Result<TlsContext> {
        Self::load_keeping(fe, Carried::default())
    }

    /// Like `load`, reusing what `carried` holds: the ticketer (when tickets are on) so tickets
    /// issued before a reload still resume after it, and the session cache.
    pub(crate) fn load_keeping(fe: &Frontend, carried: Carried) -> Result<TlsContext> {
        let ticketer = carried.ticketer;
        let provider = Arc::new(provider_for(fe));
        let mut refusing = false;
        let (certs, default_index) = match (&fe.certificates.source, fe.acme()) {
            (_, Some(acme)) => {
                let (cert, refuse) = acme_certificate(acme, &provider)?;
                refusing = refuse;
                (vec![cert], 0)
            }
            (CertSource::SelfSigned | CertSource::Acme, None) => {
                let mut all = vec![certs::self_signed(&provider)?];
                for f in added::bundles(fe) {
                    all.push(certs::load_certificate(&f, &provider)?);
                }
                (all, 0)
            }
            (CertSource::Files { paths, default }, None) => {
                let mut paths = paths.clone();
                paths.extend(added::bundles(fe));
                file_certificates(
                    &paths,
                    (default.as_deref(), &fe.certificates.pkcs11),
                    &provider,
                )?
            }
        };
        let mut certs = certs;
        if fe.ocsp != OcspMode::Off {
            for c in &mut certs {
                staple(c, fe);
            }
        }
        let (unknown_sni, missing_sni) = if refusing {
            (SniFallback::Reject, SniFallback::Reject)
        } else {
            (fe.certificates.unknown_sni, fe.certificates.missing_sni)
        };
        let on_demand = fe.acme().and_then(|a| a.on_demand.as_ref()).map(|_| {
            carried
                .on_demand
                .clone()
                .unwrap_or_else(|| OnDemandCerts::new(OnDemandEvents::default()))
        });
        let resolver = Arc::new(
            SniResolver::new(&certs, default_index, unknown_sni, missing_sni)
                .with_on_demand(on_demand.clone()),
        );
        let built = server_config(fe, provider, resolver.clone())?;
        let mut template = built.config;
        let client_check = built.client_check;
        // The trust of every policy and which names get it: a change to either (a CA, a CRL,
        // a name moved to a route that asks for certificates, routes reordered) must invalidate
        // the sessions made before, which rustls resumes without asking for a certificate.
        let (mut policies, trust) = route_policies(fe, &resolver, Trust::new(built.client_trust))?;
        let client_trust = trust.digest();
        let domain = resumption_domain(&certs, client_trust);
        let ticketer = if fe.resumption.tickets {
            let t = ticketer_for(fe, ticketer, domain).map_err(|e| match e {
                TicketerError::Keys(e) => e,
                TicketerError::Tls(source) => Error::Tls {
                    frontend: fe.name.clone(),
                    source,
                },
            })?;
            // Stateless tickets are shared by all workers, so a resumption can land on any of
            // them; their keys are read without a lock (see tickets.rs).
            template.ticketer = t.clone();
            Some(t)
        } else {
            None
        };
        let sessions = match carried.sessions {
            // Resized by the reload once every frontend has loaded (nothing changes before).
            Some(cache) => cache,
            None => SessionCache::new(
                fe.resumption.cache_size,
                fe.resumption.ticket_lifetime,
                SessionCounters::default(),
            ),
        };
        template.session_storage = sessions.clone();
        // The same ticket keys and sessions: rustls resumes a session only for the server name
        // it was made for, and a name always gets the same policy.
        for p in &mut policies {
            p.template.ticketer = template.ticketer.clone();
            p.template.session_storage = sessions.clone();
        }
        let want = fe.session_store.as_ref().map(|s| Target {
            url: s.url.clone(),
            shown: s.url_for_display(),
            timeout: s.timeout,
            key: s.key.clone(),
            key_digest: Target::digest_key_file(&s.key),
        });
        let store = match (want, carried.store) {
            (Some(want), Some(have)) if *have.target() == want => Some(have),
            (Some(want), _) => Some(SharedStore::open(&fe.name, &want, carried.store_counters)?),
            (None, _) => None,
        };
        let resumes = Resumes {
            domain,
            lifetime: fe.resumption.ticket_lifetime,
            tls13: fe.tls.versions.contains(&&rustls::version::TLS13),
            tickets: fe.resumption.tickets,
        };
        Ok(TlsContext {
            certs,
            template,
            resolver,
            ticketer,
            sessions,
            store,
            resumes,
            client_trust,
            client_check,
            policies,
            requires_client_cert: fe.client_auth.mode == crate::config::ClientAuth::Required,
            backend_tls: backend_clients(fe)?,
            on_demand,
        })
    }

    /// Worker `worker`'s server configuration: its own certificate resolver (which notes the
    /// worker's choice), the frontend's shared ticket keys and session cache, and with a remote
    /// store the worker's own side of it (connection, queue, slot).
    pub(crate) fn worker_config(&self, worker: usize) -> Arc<WorkerTls> {
        // One side of the remote store per worker, whichever policy a handshake gets.
        let remote = self.store.as_ref().map(|store| {
            Arc::new(RemoteSessions::new(
                self.sessions.clone(),
                store.for_worker(worker),
                &self.resumes,
            ))
        });
        let by_name = self
            .policies
            .iter()
            .map(|p| {
                let mut tls =
                    self.worker_config_of(&p.template, p.client_check.clone(), remote.clone());
                tls.policy = Some(p.route);
                tls.requires_client_cert = p.required;
                (p.sni.clone(), Arc::new(tls))
            })
            .collect();
        let mut main = self.worker_config_of(&self.template, self.client_check.clone(), remote);
        main.by_name = by_name;
        main.requires_client_cert = self.requires_client_cert;
        main.backend_tls = self
            .backend_tls
            .iter()
            .map(|(route, c)| (route.clone(), backend_tls::for_worker(c)))
            .collect();
        Arc::new(main)
    }

    /// A worker's configuration made from `template`, with its side of the remote store.
    fn worker_config_of(
        &self,
        template: &ServerConfig,
        client_check: Option<Arc<client_auth::Lenient>>,
        remote: Option<Arc<RemoteSessions>>,
    ) -> WorkerTls {
        let mut c = template.clone();
        let resolver = Arc::new(WorkerResolver::new(self.resolver.clone()));
        c.cert_resolver = resolver.clone();
        if let Some(r) = &remote {
            c.session_storage = r.clone();
            if !self.resumes.tickets {
                // Each TLS 1.3 stateful ticket is a write to the store: one per handshake
                // rather than rustls' two (a client resumes one connection at a time with it).
                c.send_tls13_tickets = 1;
            }
        }
        let resumption = Arc::new(resumption::WorkerResumption::new(
            c.ticketer.clone(),
            c.session_storage.clone(),
        ));
        c.ticketer = resumption.clone();
        c.session_storage = resumption.clone();
        WorkerTls {
            config: Arc::new(c),
            resolver,
            client_check,
            remote,
            resumption,
            by_name: Vec::new(),
            policy: None,
            requires_client_cert: false,
            backend_tls: Vec::new(),
        }
    }
}

/// The client configuration of each set of backends `fe` reaches in TLS, by route.
fn backend_clients(fe: &Frontend) -> Result<Vec<(String, Arc<rustls::ClientConfig>)>> {
    let sets = std::iter::once(("default", &fe.backend))
        .chain(fe.route.0.iter().map(|r| (r.name.as_str(), &r.backend)));
    let mut out = Vec::new();
    for (route, backends) in sets {
        if let Some(settings) = &backends.tls {
            out.push((
                route.to_string(),
                backend_tls::client_config(&fe.name, settings)?,
            ));
        }
    }
    Ok(out)
}

/// The routes' own TLS policies, loaded over the frontend's certificates, their trust added.
fn route_policies(
    fe: &Frontend,
    resolver: &Arc<SniResolver>,
    mut trust: Trust,
) -> Result<(Vec<Policy>, Trust)> {
    let mut policies = Vec::new();
    for (i, route) in fe.route.0.iter().enumerate() {
        let Some(policy) = &route.policy else {
            continue;
        };
        let mut with = fe.clone();
        with.tls = policy.tls.clone();
        with.client_auth = policy.client_auth.clone();
        let b = server_config(&with, Arc::new(provider_for(&with)), resolver.clone())?;
        trust.add(&route.sni, b.client_trust);
        policies.push(Policy {
            route: i,
            sni: route.sni.clone(),
            template: b.config,
            client_check: b.client_check,
            required: policy.client_auth.mode == crate::config::ClientAuth::Required,
        });
    }
    Ok((policies, trust))
}

/// A configuration template built for `fe`'s TLS settings and client authentication, over the
/// frontend's certificates (`resolver`), without ticket keys or session storage yet.
struct Built {
    config: ServerConfig,
    client_trust: Option<[u8; 32]>,
    client_check: Option<Arc<client_auth::Lenient>>,
}

fn server_config(
    fe: &Frontend,
    provider: Arc<CryptoProvider>,
    resolver: Arc<SniResolver>,
) -> Result<Built> {
    let tls_err = |source| Error::Tls {
        frontend: fe.name.clone(),
        source,
    };
    let client_verifier = client_auth::verifier(fe, &provider)?;
    let client_trust = client_verifier.as_ref().map(|v| v.trust_digest);
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&fe.tls.versions)
        .map_err(tls_err)?;
    let (builder, client_check) = match client_verifier {
        Some(v) => (
            builder.with_client_cert_verifier(v.checks),
            v.after_handshake,
        ),
        None => (builder.with_no_client_auth(), None),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols.clone_from(&fe.tls.alpn);
    // With shuck's record layer, shuck protects a TLS 1.3 connection's records itself after
    // the handshake (`records`); rustls hands the traffic keys over only when this allows
    // it. The stream reads it back to know which layer the records go to.
    config.enable_secret_extraction = fe.record_layer.layer == crate::config::RecordLayer::Shuck;
    // Server preference: the server knows which cipher is cheap on its CPU.
    config.ignore_client_order = true;
    Ok(Built {
        config,
        client_trust,
        client_check,
    })
}

/// The client-certificate trust of a frontend and its routes' policies, and which names each
/// policy takes, as one digest; `None` when nothing asks for client certificates.
struct Trust {
    digest: aws_lc_rs::digest::Context,
    any: bool,
}

impl Trust {
    fn new(frontend: Option<[u8; 32]>) -> Trust {
        let mut t = Trust {
            digest: aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256),
            any: false,
        };
        t.trust(frontend);
        t
    }

    fn trust(&mut self, t: Option<[u8; 32]>) {
        match t {
            Some(d) => {
                self.any = true;
                self.digest.update(b"trust");
                self.digest.update(&d);
            }
            None => self.digest.update(b"none"),
        }
    }

    /// A route's policy, after those before it: its names and its trust.
    fn add(&mut self, names: &[String], t: Option<[u8; 32]>) {
        self.digest.update(b"route");
        for n in names {
            self.digest.update(n.as_bytes());
            self.digest.update(b"\0");
        }
        self.trust(t);
    }

    fn digest(self) -> Option<[u8; 32]> {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.digest.finish().as_ref());
        self.any.then_some(out)
    }
}

enum TicketerError {
    Keys(Error),
    Tls(rustls::Error),
}

/// The frontend's ticket keys: read from its key files, else the carried random keys (kept
/// across a reload), else new random ones.
fn ticketer_for(
    fe: &Frontend,
    carried: Option<Arc<tickets::Ticketer>>,
    domain: [u8; 32],
) -> std::result::Result<Arc<tickets::Ticketer>, TicketerError> {
    let lifetime = fe.resumption.ticket_lifetime.as_secs();
    if let Some(files) = &fe.resumption.ticket_keys {
        let keys = ticket_keys::read(&files.paths, files.format).map_err(TicketerError::Keys)?;
        return tickets::Ticketer::from_files(&keys, lifetime, domain).map_err(TicketerError::Tls);
    }
    match carried {
        Some(t) if !t.is_from_files() => Ok(t),
        _ => tickets::Ticketer::new(lifetime, domain).map_err(TicketerError::Tls),
    }
}

/// What a resumed session is bound to: the names the frontend serves and its client-certificate
/// trust. A session (ticket or stored) resumes only under the same domain, so a frontend with
/// other names or other trust (mTLS) never accepts another's session, even when they share
/// ticket keys or a store. Renewing a certificate for the same names keeps the domain.
fn resumption_domain(certs: &[LoadedCert], client_trust: Option<[u8; 32]>) -> [u8; 32] {
    let mut names: Vec<&str> = certs
        .iter()
        .flat_map(|c| c.names.iter().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    ctx.update(b"shuck resumption domain v1\0");
    for n in names {
        ctx.update(n.as_bytes());
        ctx.update(b"\0");
    }
    match client_trust {
        Some(t) => {
            ctx.update(b"client trust\0");
            ctx.update(&t);
        }
        None => ctx.update(b"no client auth\0"),
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The certificates of `paths` (directories expanded), and the position of `default` among them
/// (the first without one).
fn file_certificates(
    paths: &[crate::config::CertFiles],
    (default, pkcs11): (Option<&std::path::Path>, &crate::config::Pkcs11Settings),
    provider: &Arc<CryptoProvider>,
) -> Result<(Vec<LoadedCert>, usize)> {
    let files = certs::expand_paths(paths)?;
    let loaded = files
        .iter()
        .map(|f| certs::load_certificate_in(f, provider, pkcs11))
        .collect::<Result<Vec<_>>>()?;
    let index = match default {
        None => 0,
        Some(d) => files
            .iter()
            .position(|f| f.cert == d)
            .ok_or_else(|| Error::Cert {
                path: d.to_path_buf(),
                message: "default_certificate is not one of the frontend's certificates".into(),
            })?,
    };
    Ok((loaded, index))
}
