package main

// The environment variables svc reads, in one table: `svc --help` and each
// verb's --help list theirs from it, docs/configuration.md is rendered from
// it (TestDocsGenerated), and TestEnvTable checks that every variable the
// code names is here and every entry is still read.

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// envVar is one environment variable: its name, the verbs that read it
// ("" for every verb) and what it does.
type envVar struct {
	name  string
	verbs []string // "dev", "serve", "control-plane", …; nil: any verb
	doc   string
}

// envVars lists every environment variable svc reads, grouped by subject.
var envVars = []envVar{
	{"SVC_DEV_PORT_OFFSET", []string{"dev"}, "added to every svc dev port (API 4242, PostgreSQL 4243, object storage 4244), so two projects run side by side (e.g. 10)"},
	{"SVC_DATABASE_URL", []string{"dev"}, "use this PostgreSQL instead of starting one"},
	{"SVC_ALLOWED_HOSTS", []string{"dev", "serve"}, "more Host names the API answers (comma-separated; loopback names always)"},
	{"SVC_ALLOWED_ORIGINS", []string{"dev", "serve"}, "more browser origins that may call the API (comma-separated)"},
	{"SVC_API_KEYS", []string{"dev", "serve"}, "keys the chat wires accept (svc serve; svc dev --listen: on every route), comma-separated"},
	{"SVC_RELAY_URL", []string{"dev"}, "the svc relay a linked svc dev publishes its session through (https://host[:port]); svc login's credentials get its token"},
	{"SVC_S3_ENDPOINT", []string{"dev", "serve"}, "external object storage instead of the built-in one (svc dev: keys from .env; svc serve: with SVC_S3_ACCESS_KEY_ID and SVC_S3_SECRET_ACCESS_KEY)"},
	{"SVC_S3_ACCESS_KEY_ID", []string{"serve"}, "the access key of SVC_S3_ENDPOINT"},
	{"SVC_S3_SECRET_ACCESS_KEY", []string{"serve"}, "the secret key of SVC_S3_ENDPOINT"},
	{"SVC_STORAGE_LOCAL_OK", []string{"serve"}, "1: svc serve may run the PostgreSQL engine with the built-in object storage (files stay on this replica's disk)"},
	{"SVC_ENGINE", []string{"dev", "serve"}, "the engine's store: file (default, the journal on disk) or postgres (schema svc_engine, shared by replicas)"},
	{"SVC_ENGINE_LEASE", []string{"dev", "serve"}, "a PostgreSQL engine replica's lease (default 8s)"},
	{"SVC_ENGINE_LEASE_RENEW", []string{"dev", "serve"}, "how often the lease is renewed (default 3s)"},
	{"SVC_ENGINE_POLL", []string{"dev", "serve"}, "how often an idle replica reads the log without a notification (default 1s)"},
	{"SVC_ENGINE_PARTITIONS", []string{"dev", "serve"}, "how many partitions a new PostgreSQL engine log is split into, each owned by one replica at a time (default 16; fixed when the log is made)"},
	{"SVC_FLEET_ADDRESS", []string{"serve"}, "the URL the other replicas reach this one at, for calls about runs it holds (default http:// and --addr, this host's name for 0.0.0.0)"},
	{"SVC_RUN_RETENTION", []string{"dev", "serve"}, "how long ended runs stay in the run history: 30d (default), 720h, or 0 to keep them"},
	{"SVC_IDEMPOTENCY_RETENTION", []string{"dev", "serve"}, "how long start idempotency keys are kept: 24h (default), 7d"},
	{"SVC_RESPONSE_RETENTION", []string{"dev", "serve"}, "how long kept Responses-wire responses stay: 30d (default), or 0 to keep them"},
	{"SVC_SCHEDULE_CLOCK_OFFSET", []string{"dev", "serve"}, "tests only: a duration added to the schedules' clock"},
	{"OPENAI_API_KEY", []string{"dev", "serve"}, "the OpenAI key of the model provider (the first provider set opens the boot gate)"},
	{"OPENAI_BASE_URL", []string{"dev", "serve"}, "another OpenAI-compatible endpoint for OPENAI_API_KEY"},
	{"ANTHROPIC_API_KEY", []string{"dev", "serve"}, "the Anthropic key of the model provider"},
	{"ANTHROPIC_BASE_URL", []string{"dev", "serve"}, "another Anthropic endpoint for ANTHROPIC_API_KEY"},
	{"SVC_MODEL_BASE_URL", []string{"dev", "serve"}, "any OpenAI-compatible provider, e.g. http://127.0.0.1:11434/v1 for a local Ollama (no key needed)"},
	{"SVC_MODEL_API_KEY", []string{"dev", "serve"}, "the key of SVC_MODEL_BASE_URL, when it needs one"},
	{"SVC_MODEL", []string{"dev", "serve"}, "the model an agent uses when its definition names none"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", []string{"dev", "serve"}, "OTLP/HTTP trace export: the collector's base URL (its /v1/traces)"},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", []string{"dev", "serve"}, "OTLP/HTTP trace export: the traces URL itself"},
	{"OTEL_EXPORTER_OTLP_HEADERS", []string{"dev", "serve"}, "headers sent with every export (k=v,…)"},
	{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", []string{"dev", "serve"}, "headers sent with trace exports (k=v,…)"},
	{"OTEL_SERVICE_NAME", []string{"dev", "serve"}, "the service.name of the spans (default svc)"},
	{"OTEL_RESOURCE_ATTRIBUTES", []string{"dev", "serve"}, "more resource attributes of the spans (k=v,…)"},
	{"DATABASE_URL", []string{"serve", "control-plane"}, "svc serve's and svc control-plane's PostgreSQL; unset, each starts its own (svc serve under --data, svc control-plane under its --data)"},
	{"SVC_MASTER_KEY", []string{"serve", "control-plane"}, "the 32-byte key (hex or base64) sealing secrets; else a 0600 key file (svc serve: --data/master.key, whose secrets move to SVC_MASTER_KEY once it is set)"},
	{"HMAC_SECRET", []string{"serve"}, "svc serve's signing secret, instead of the one minted on its first boot"},
	{"SVC_IMAGE_TAG", []string{"serve"}, "the image tag svc serve reports in its handshake"},
	{"SVC_CONTROL_PLANE_URL", nil, "the control plane of svc login, whoami and the verbs that need one; svc serve: the one it trusts"},
	{"XDG_CONFIG_HOME", nil, "holds svc/credentials.json and svc/control-plane.key (default ~/.config)"},
	{"XDG_DATA_HOME", []string{"control-plane"}, "holds svc/control-plane, the control plane's own PostgreSQL when DATABASE_URL is unset (default ~/.local/share)"},
	{"SVC_TOKEN", []string{"login"}, "svc login's --token, kept off the command line (which other accounts read)"},
	{"SVC_INVITATION", []string{"login"}, "svc login's --invitation, kept off the command line"},
	{"SVC_LINK_SECRET", []string{"link"}, "svc link's --secret, kept off the command line"},
	{"SVC_TUNNEL_DOMAIN", []string{"control-plane"}, "the relay's --domain; the console at svc dev's deeplink talks only to https://<sub>.tun.<domain>"},
	{"SVC_DEPLOYMENT_NETWORKS", []string{"control-plane"}, "networks (CIDR, comma-separated) the boxes it links and proxies to must be in; empty allows any"},
	{"SVC_OIDC_ISSUER", []string{"control-plane"}, "single sign-on: the OpenID provider's issuer URL (checked at boot)"},
	{"SVC_OIDC_CLIENT_ID", []string{"control-plane"}, "single sign-on: the control plane's client id at the provider"},
	{"SVC_OIDC_CLIENT_SECRET", []string{"control-plane"}, "single sign-on: its client secret"},
	{"SVC_OIDC_ALLOWED_DOMAINS", []string{"control-plane"}, "single sign-on: email domains that may sign in (comma-separated)"},
	{"SVC_OIDC_ALLOWED_GROUPS", []string{"control-plane"}, "single sign-on: groups (the groups claim) that may sign in (comma-separated)"},
	{"SVC_OIDC_ORG", []string{"control-plane"}, "single sign-on: the organization its users join (default: the first)"},
	{"SVC_OIDC_OWNERS", []string{"control-plane"}, "single sign-on: who joins SVC_OIDC_ORG as an owner at their first sign-in: emails and group:NAME entries (comma-separated), so a team that signs in only through its provider has an owner"},
	{"SVC_OIDC_NAME", []string{"control-plane"}, "single sign-on: the provider's name on the sign-in page"},
	{"SVC_DEV_URL", []string{"env"}, "set by eval \"$(svc env)\": the running svc dev's API URL"},
	{"SVC_DEV_KEY", []string{"env"}, "set by eval \"$(svc env)\": its dev key, a credential for the chat wires and the API"},
	{"CI", nil, "any value: never prompt (as --yes)"},
	{"GOGC", []string{"dev"}, "the Go collector's heap target; unset, svc dev sets a larger one for itself (about half the collection work under load)"},
}

// envHelp writes the environment section of the help of command (a verb
// path such as "svc" or "svc control-plane"): every variable for "svc",
// else those its top-level verb reads. It writes nothing when there are none.
func envHelp(w io.Writer, command string) {
	verb, _, _ := strings.Cut(strings.TrimPrefix(command, "svc "), " ")
	var rows []envVar
	for _, v := range envVars {
		if command == "svc" || (v.verbs != nil && slices.Contains(v.verbs, verb)) {
			rows = append(rows, v)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nenvironment:\n")
	for _, v := range rows {
		if len(v.name) > 26 {
			fmt.Fprintf(w, "  %s\n  %-26s %s\n", v.name, "", v.doc)
			continue
		}
		fmt.Fprintf(w, "  %-26s %s\n", v.name, v.doc)
	}
}
