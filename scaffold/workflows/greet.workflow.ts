import { sleep } from "svc";

export const inputSchema = {
  type: "object",
  properties: { name: { type: "string", minLength: 1 } },
  required: ["name"],
  additionalProperties: false,
} as const;

export const outputSchema = {
  type: "object",
  properties: { greeting: { type: "string" } },
  required: ["greeting"],
} as const;

async function compose(name: string): Promise<string> {
  "use step";
  return `Hello, ${name}!`;
}

export default async function greet(input: { name: string }) {
  "use workflow";
  const greeting = await compose(input.name);
  await sleep("1s");
  return { greeting };
}
