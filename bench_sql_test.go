package main

import (
	"testing"
	"time"
)

// BenchmarkStepSQL measures a step doing one sql round trip (a
// parameterized select on a warm pool, rows decoded into the VM), per
// step call, with the step VM pooled as in the engine:
//
//	go test -run '^$' -bench BenchmarkStepSQL -benchtime 2000x .
func BenchmarkStepSQL(b *testing.B) {
	e := newSQLTestEnv(b)
	e.exec(b, `create table items (id int primary key, name text, price numeric)`)
	e.exec(b, `insert into items select i, 'item ' || i, i * 1.5 from generate_series(1, 100) i`)
	for name, body := range map[string]string{
		"select1row": "return (await sql`select id, name, price from items where id = ${7}`)[0].name;",
		"select100":  "return (await sql`select id, name, price from items`).length;",
		"tx2stmts":   "return await sql.begin(async (tx) => { await tx`update items set price = price where id = ${1}`; return (await tx`select 1 as n`)[0].n; });",
	} {
		b.Run(name, func(b *testing.B) {
			def := sqlStepDef(b, body, 10*time.Second)
			if _, err := e.run(b, def); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := e.run(b, def); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
