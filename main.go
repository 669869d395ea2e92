// Command svc is a local dev runtime and a self-hosted runtime for AI agents
// and durable workflows written in TypeScript.
package main

import (
	"os"

	_ "github.com/dop251/goja"
	_ "github.com/evanw/esbuild/pkg/api"
	_ "github.com/google/uuid"
	_ "github.com/jackc/pgx/v5"
)

func main() {
	os.Exit(0)
}
