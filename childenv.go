package main

// The environment of the processes svc starts.
//
// svc's own environment holds secrets: model provider keys
// (OPENAI_API_KEY, ANTHROPIC_API_KEY), cloud credentials (AWS_*),
// SVC_DATABASE_URL and whatever else the user exported. A child that
// inherited it would expose them to anyone who can read the child's
// /proc/<pid>/environ, which for a database server includes every client
// allowed to call pg_read_binary_file. So no child inherits svc's
// environment: each gets childEnv, a short allow-list plus what that child
// needs.

import "strings"

// childEnvInherited are the variables a child takes from svc's environment
// when they are set: where programs are, the locale and time zone, and the
// temporary directory. HOME is set by the caller, because it belongs to the
// user the child runs as.
var childEnvInherited = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

// childEnv returns the environment of a child process: the
// childEnvInherited variables and the variables named in inherit, each
// taken from getenv when set there, then set, a list of "KEY=value" entries
// that replace an inherited entry of the same key. Nothing else of svc's
// environment is passed on.
func childEnv(getenv func(string) string, inherit []string, set ...string) []string {
	var env []string
	keys := make(map[string]int) // key -> index in env
	add := func(key, entry string) {
		if i, ok := keys[key]; ok {
			env[i] = entry
			return
		}
		keys[key] = len(env)
		env = append(env, entry)
	}
	for _, list := range [][]string{childEnvInherited, inherit} {
		for _, key := range list {
			if v := getenv(key); v != "" {
				add(key, key+"="+v)
			}
		}
	}
	for _, entry := range set {
		key, _, _ := strings.Cut(entry, "=")
		add(key, entry)
	}
	return env
}
