import { defineAgent, tool } from "svc";

export default defineAgent({
  instructions: "You are a concise, friendly assistant for the {{name}} project.",
  tools: {
    add: tool({
      description: "Add two numbers",
      parameters: {
        type: "object",
        properties: { a: { type: "number" }, b: { type: "number" } },
        required: ["a", "b"],
      },
      execute: async ({ a, b }: { a: number; b: number }) => ({ sum: a + b }),
    }),
  },
});
