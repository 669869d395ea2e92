package main

import (
	"testing"
)

// schemaSample is src/schema.ts and user code that imports it and types
// values with the tables' row types; the @ts-expect-error lines prove the
// types are strict (tsc fails on an unused one).
var schemaSample = map[string]string{
	"src/schema.ts": `
import { sql } from "drizzle-orm";
import { pgTable, serial, text, varchar, integer, bigint, boolean, timestamp, date, jsonb, uuid, numeric, index, uniqueIndex, primaryKey, foreignKey } from "drizzle-orm/pg-core";

export const customers = pgTable("customers", {
  id: uuid("id").primaryKey().defaultRandom(),
  email: varchar("email", { length: 320 }).notNull().unique(),
  tier: text("tier", { enum: ["free", "pro"] }).notNull().default("free"),
});

export const orders = pgTable(
  "orders",
  {
    id: serial("id").primaryKey(),
    customerId: uuid("customer_id").notNull().references(() => customers.id, { onDelete: "cascade" }),
    item: text("item").notNull(),
    qty: integer("qty").notNull().default(1),
    cents: bigint("cents", { mode: "bigint" }),
    total: numeric("total", { precision: 10, scale: 2 }),
    paid: boolean("paid").notNull().default(false),
    meta: jsonb("meta").$type<{ source: string }>(),
    placedAt: timestamp("placed_at", { withTimezone: true }).notNull().defaultNow(),
    due: date("due"),
  },
  (t) => [index("orders_item_idx").on(t.item, t.qty.desc()).where(sql` + "`${t.paid} = false`" + `), uniqueIndex().on(t.customerId, t.item)],
);

export const lines = pgTable("lines", (b) => ({
  orderId: b.integer().notNull(),
  n: b.smallint().notNull(),
}), (t) => ({ pk: primaryKey({ columns: [t.orderId, t.n] }), fk: foreignKey({ columns: [t.orderId], foreignColumns: [orders.id] }).onDelete("cascade") }));
`,
	"workflows/orders.workflow.ts": `
import type { InferSelectModel, InferInsertModel } from "drizzle-orm";
import { orders, customers, lines } from "../src/schema";

type Order = typeof orders.$inferSelect;
type NewOrder = typeof orders.$inferInsert;

async function describe(o: Order) {
  "use step";
  const when: Date = o.placedAt;
  const cents: bigint | null = o.cents;
  const source: string | undefined = o.meta?.source;
  const due: string | null = o.due;
  return o.item + " x" + o.qty + " " + when.toISOString() + (cents ?? 0n).toString() + (source ?? "") + (due ?? "") + o.total;
}

export default async function order(input: { order: Order }) {
  "use workflow";
  const fresh: NewOrder = { customerId: "c", item: "tea" };
  // @ts-expect-error item is required on insert
  const missing: NewOrder = { customerId: "c" };
  // @ts-expect-error qty is not null
  const nullQty: Order = { ...input.order, qty: null };
  const tier: InferSelectModel<typeof customers>["tier"] = "pro";
  // @ts-expect-error tier is one of the enum's strings
  const badTier: InferInsertModel<typeof customers>["tier"] = "gold";
  const line: typeof lines.$inferInsert = { orderId: 1, n: 2 };
  const column: string = orders.customerId.name;
  return [await describe(input.order), fresh.item, missing, nullQty, tier, badTier, line.n, column];
}
`,
}

// TestTypegenSchemaTypes: tsc --strict over the scaffold plus src/schema.ts
// and a workflow that imports it and uses its row types (.svc/drizzle.d.ts).
func TestTypegenSchemaTypes(t *testing.T) {
	dir := projectDir(t)
	for f, src := range schemaSample {
		writeFile(t, dir, f, src)
	}
	if out, err := typecheck(t, dir); err != nil {
		t.Fatalf("tsc over the schema sample: %v\n%s", err, out)
	}
}
