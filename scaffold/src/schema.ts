import { pgTable, serial, text, timestamp } from "drizzle-orm/pg-core";

// The project's own tables. `svc dev` migrates its PostgreSQL to match this
// file on every save (the migrations land in .svc/migrations: commit them).
export const greetings = pgTable("greetings", {
  id: serial("id").primaryKey(),
  name: text("name").notNull(),
  greeting: text("greeting").notNull(),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
});
