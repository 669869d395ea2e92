import { sleep, sql, storage } from "svc";
import { greetings } from "../src/schema";

export const inputSchema = {
  type: "object",
  properties: { name: { type: "string", minLength: 1 } },
  required: ["name"],
  additionalProperties: false,
} as const;

export const outputSchema = {
  type: "object",
  properties: { greeting: { type: "string" }, id: { type: "integer" }, file: { type: "string" } },
  required: ["greeting", "id", "file"],
} as const;

type Greeting = typeof greetings.$inferSelect;

async function compose(name: string): Promise<string> {
  "use step";
  return `Hello, ${name}!`;
}

// Steps do the I/O: a row in the project's PostgreSQL (values are always
// bound as parameters) and a file in its object storage.
async function save(name: string, greeting: string): Promise<{ id: number; file: string }> {
  "use step";
  const [row] = await sql<Pick<Greeting, "id">>`insert into greetings (name, greeting) values (${name}, ${greeting}) returning id`;
  const file = `greetings/${row.id}.txt`;
  await storage.put(file, greeting + "\n", { contentType: "text/plain; charset=utf-8" });
  return { id: row.id, file };
}

export default async function greet(input: { name: string }) {
  "use workflow";
  const greeting = await compose(input.name);
  const saved = await save(input.name, greeting);
  await sleep("1s");
  return { greeting, ...saved };
}
