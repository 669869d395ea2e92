package main

import (
	"slices"
	"testing"
)

func TestChildEnv(t *testing.T) {
	parent := map[string]string{
		"PATH":              "/usr/bin:/bin",
		"LANG":              "C.UTF-8",
		"HOME":              "/home/dev",
		"OPENAI_API_KEY":    "sk-secret",
		"ANTHROPIC_API_KEY": "sk-ant-secret",
		"SVC_DATABASE_URL":  "postgres://u:p@db/x",
		"AWS_ACCESS_KEY_ID": "AKIA",
		"PGPASSWORD":        "secret",
		"DOCKER_HOST":       "unix:///run/docker.sock",
	}
	getenv := func(k string) string { return parent[k] }
	tests := []struct {
		name    string
		inherit []string
		set     []string
		want    []string
	}{
		{"allow-list only", nil, nil, []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}},
		{"inherit named variables that are set", []string{"HOME", "DOCKER_HOST", "XDG_RUNTIME_DIR"}, nil,
			[]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/home/dev", "DOCKER_HOST=unix:///run/docker.sock"}},
		{"set adds and replaces", []string{"HOME"}, []string{"HOME=/var/lib/postgresql", "POSTGRES_PASSWORD=pw"},
			[]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/var/lib/postgresql", "POSTGRES_PASSWORD=pw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := childEnv(getenv, tt.inherit, tt.set...); !slices.Equal(got, tt.want) {
				t.Errorf("childEnv(%q, %q) = %q; want %q", tt.inherit, tt.set, got, tt.want)
			}
		})
	}
}
