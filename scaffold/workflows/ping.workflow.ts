async function pong(): Promise<string> {
  "use step";
  return "pong";
}

export default async function ping() {
  "use workflow";
  return { reply: await pong() };
}
