// Command svc is a local dev runtime and a self-hosted runtime for AI agents
// and durable workflows written in TypeScript.
//
// Usage:
//
//	svc [--json] [--verbose] [--yes] <verb> [flags] [args]
//	svc --version
//
// Verbs (docs/cli.md lists every flag, from the verb table in cli.go):
//
//	init [dir]                 scaffold a starter project (local-only, no control plane needed)
//	dev                        boot the local runtime: PostgreSQL, journal, object storage, endpoints
//	workflows list|schema|start list workflows, read their schemas, start runs
//	runs list|get|cancel|rerun|logs|stream inspect, cancel and rerun workflow runs, read their logs and streams
//	hooks resume <token>       resume a workflow waiting on a hook
//	schedules list|pause|resume the workflows' schedules
//	serve [--addr :8080] [--data DIR] [dir]  run a project as a box (the deployed container)
//	link                       register a deployed container with a control plane
//	login|logout|whoami        sign in to a control plane, sign out, print who is signed in
//	orgs list|create|rename    your organizations
//	members list|invite|role|remove|invitations|uninvite  an organization's members
//	agents list|create|rename|delete|deployment  an organization's agents
//	keys list|create|revoke    an organization's API keys for the chat wires
//	devices list|revoke        your signed-in devices
//	audit [verify]             the organization's audit log and its hash chain
//	control-plane              serve a control plane (database from DATABASE_URL)
//	mcp [--agent ID]           MCP over stdio for coding agents (relayed to svc dev's or the box's POST /mcp)
//	relay --domain D [--addr :443] --tls-cert F --tls-key F [--state DIR]  serve the tunnel's public end (https://<sub>.tun.D[:port])
//	env                        print the local credentials of the running svc dev: eval "$(svc env)"
//	console                    print a new link to the running svc dev's console
//	rotate-key                 mint a new dev key; the old one is refused at once
//	version                    print the version, commit and Go version (also svc --version)
//
// The workflows, runs and env verbs reach the svc dev of the project in the
// current directory only: the one .svc/runtime.json names, which must say on
// /api/health that it serves this directory and local-dev installation;
// otherwise they exit 3 (dev_not_running).
//
// Global flags (accepted anywhere on the command line):
//
//	--json     print one JSON envelope line on stdout: {"ok":true,"data":…} or {"ok":false,"error":…}
//	--verbose  stream every log line, including PostgreSQL output
//	--yes      never prompt (also implied by --json, CI=…, or stdin not being a terminal, e.g. < /dev/null)
//
// Environment: every variable svc reads is in one table, envVars in
// config_env.go (svc --help and each verb's --help list theirs from it;
// docs/configuration.md is rendered from it; TestEnvTable checks the code
// names no other).
//
// Exit codes: 0 ok, 1 generic, 2 auth, 3 no project / no target / dev not running, 4 not found.
//
// # Code map
//
// One flat package; a file's prefix is its identifiers' prefix. Lower
// layers (engine, journal, user code) never name the commands, the dev boot
// or HTTP (TestLayering).
//
//	commands     main.go (wiring only), cli.go (verb table, envelope, exit codes), cli_workflows.go
//	             (workflows and runs verbs), cli_stream.go (svc runs stream), cli_target.go (--agent: a box through the control plane),
//	             cli_link.go (svc link), cli_login.go (login, logout, whoami), cli_serve.go (svc serve),
//	             cli_env.go (svc env, svc console), cli_mcp.go (svc mcp: stdio relay), cli_terminal_*.go, version.go, agent_setup.go
//	             (coding-agent skill and MCP files); mcp.go (MCP protocol), mcp_tools.go (its tools over
//	             the runtime), mcp_http.go (POST /mcp)
//	runtime      runtime.go (what dev and the box share: migrations, engine, secrets, object
//	             storage, agents, gate, compile)
//	dev boot     devenv.go (svc dev: services, typegen, auto-migrate, dev routes), dev_services.go (the
//	             console's local services and keys), dev_tls.go (--tls: the project's certificate,
//	             the CLI's pinned client), project.go, postgres.go (the local cluster),
//	             postgres_root.go (the clusters of root sessions), postgres_role.go (the project's
//	             role: what the URL svc hands out may do), postgres_supervise.go (restarting it when
//	             it dies), childenv.go, watch.go, gate.go
//	box          box.go (handshake, signing secret, challenge, teaching, identity), box_auth.go (the
//	             box's credential check)
//	HTTP         server.go (the route table), http_guard.go (Host, Origin, credential, pacing),
//	             http_peer.go, http_peer_*.go (the account of a loopback connection: the developer's
//	             own passes without a key), console_session.go (the console link's one-time codes
//	             and sessions), http_transport.go (the outbound connection pools: providers,
//	             fetch, storage, the control plane's proxy, the relay's tunnels),
//	             ratelimit.go (token buckets per key: per-source limits, 429), api_workflows.go (workflows and runs; a run's stream as SSE), api_sessions.go (session transcripts), cors.go
//	             (CORS for the console's origin), metrics_http.go (GET /metrics, requests recorded),
//	             wires.go (OpenAI chat, Anthropic, AG-UI),
//	             wire_responses.go (OpenAI Responses), wire_params.go (the request parameters each wire
//	             refuses), console.go (the web console: console/*
//	             embedded), contract.go
//	engine       engine.go (state, start and cancel), events.go (journal records; apply, the state
//	             machine of runs), engine_hooks.go (how each feature below hangs off apply: one hook per
//	             event type it cares about), engine_children.go (child runs), engine_journal.go (journal
//	             failures, recovery), engine_replica.go (replicas on one log: ownership, claims, void
//	             events, delivery), engine_history.go (archive, prune, compaction), engine_queue.go (queued
//	             starts), engine_concurrency.go (serial and per-key concurrency limits), engine_versions.go (run pinning), engine_idem.go (idempotent starts),
//	             schedule_cron.go (cron expressions, time zones, DST), schedule_engine.go (schedules: fires,
//	             pause, catch-up), schedule_api.go (their HTTP routes and svc schedules),
//	             engine_store.go (the store seam, SVC_ENGINE), engine_store_file.go (on the journal),
//	             engine_store_pg.go (on PostgreSQL: svc_engine, a log in partitions, fenced replica leases),
//	             engine_fleet.go (the engine the runtime calls: one engine per partition held, runs routed by
//	             the partition in their ids), engine_fleet_members.go (who holds which partition),
//	             engine_fleet_rpc.go (calls forwarded to the replica that holds a run), engine_stream.go (run streams:
//	             getWritable(), chunks as events, readers), execution.go
//	             (a run in its workflow VM), steps.go (step VMs, attempts, timeouts), journal.go
//	             (segments preallocated, snapshots, fsync; a durable append written by its waiter), workflow_history.go (ended runs in PostgreSQL),
//	             workflow_stream.go (their streams, svc.run_streams), json_limits.go (what can be journaled), metrics.go (what the engine, stores and
//	             wires record) and metrics_text.go (the Prometheus text format)
//	user code    jsruntime.go (goja VMs), bundle.go (esbuild: packages, Node built-ins, the drizzle
//	             stand-in), eventloop.go, js_platform.go (what a VM gets: the entry), js_web.go,
//	             js_fetch.go, js_url.go, js_encoding.go, js_crypto.go and js/web*.js (the web
//	             platform), js_sql.go (sql), js_storage.go (storage), catalog.go (the project's agents
//	             and workflows), typegen.go and typegen_drizzle.go (.svc/*.d.ts), schema.go,
//	             schema_format.go and schema_ts.go (JSON Schema), automigrate.go and migrate.go
//	             (src/schema.ts to migrations)
//	agents       agent.go (the agent loop and tools), session.go (durable sessions: one turn at a time across
//	             replicas, turns in progress and those a dead process interrupted), session_responses.go
//	             (kept Responses-wire responses), agent_history.go
//	             (a session's transcript), model.go, providers.go (model provider clients);
//	             agent_replicas_test.go (sessions, approvals and kills across real replicas)
//	services     s3.go, s3_multipart.go, s3_sigv4.go, s3_sigv2.go and s3_conditional.go (the built-in
//	             object storage; its tests run against versitygw too: versitygw_test.go,
//	             storage_suite_test.go, s3_judge_test.go), storage_client.go (an S3 client sharing the
//	             server's signing code), secrets.go (encrypted secrets), files.go (atomic writes and
//	             private modes), fdatasync_*.go (durable writes per OS)
//	deployment   cp_server.go, cp_store.go, cp_device.go (sign-in), cp_limits.go (the sign-in and proxy limits shared by replicas), cp_link.go, cp_proxy.go (the signed
//	             proxy to deployments), cp_network.go (SVC_DEPLOYMENT_NETWORKS, checked at dial time),
//	             cp_console.go (the console at deeplinks and for boxes), cp_client.go
//	             (the control plane's client), cp_members.go (roles on every route, members,
//	             invitations), cp_audit.go (the hash-chained audit log), cp_team.go (the team page,
//	             cp_pages/), cli_members.go (svc members, svc audit), cp_agents.go (rename, delete,
//	             a deployment's link history), cp_keys.go (API keys: expiry, revocation), cp_credentials.go
//	             (credentials' TTL, a user's devices), cp_oidc.go (single sign-on: SVC_OIDC_*, the provider's
//	             discovery, JWKS and ID token check), cp_oidc_flow.go (its sign-in: state, nonce, PKCE, the
//	             user it maps to; judged by tools/oidcop, a module of its own), cli_agents.go (svc agents, svc keys, svc devices),
//	             link.go (the box contract's client side: handshake,
//	             secret proof, teaching), sign.go (request signing), sign_window.go (its per-sender replay
//	             windows in the box's PostgreSQL), ident.go and ident_verify.go (identity and tunnel
//	             registration tokens, JWKS)
//	telemetry    otel_export.go (OTEL_* settings, spans, the OTLP/HTTP JSON exporter: bounded queue,
//	             batches, drops counted), otel_engine.go (spans of runs, steps, sleeps, hooks, child
//	             runs), otel_user.go (fetch, sql and storage calls of user code), otel_agent.go (agent
//	             turns, model and tool calls), otel_http.go (the server span, an incoming traceparent);
//	             tools/otelcol (the tests' collector, a module of its own)
//	tunnel       relay.go (svc relay: registration, spent tokens under --state, routing, identity at the door), cli_relay.go,
//	             tunnel.go (svc dev's tunnel client), cp_tunnel.go (registration tokens)
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// main wires the process to run and is the only place that exits.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], newProcessIO())
	stop()
	os.Exit(code)
}
