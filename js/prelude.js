// The JavaScript half of the ambient "svc" module, evaluated once in every VM
// before the user's module. The Go half (sleep, hooks, workflows.*) is added
// by the runtime for the VM's role.
(function () {
  class FatalError extends Error {
    constructor(message) {
      super(message);
      this.name = "FatalError";
    }
  }
  class RetryableError extends Error {
    constructor(message, options) {
      super(message);
      this.name = "RetryableError";
      this.retryAfter = options && options.retryAfter;
    }
  }
  function defineAgent(config) {
    if (!config || typeof config !== "object") throw new TypeError("defineAgent(config): config must be an object");
    return Object.assign({ __svcAgent: true }, config);
  }
  function tool(def) {
    if (!def || typeof def.execute !== "function") throw new TypeError("tool(def): def.execute must be a function");
    return Object.assign({ __svcTool: true }, def);
  }
  function defineConfig(config) {
    return config;
  }
  return { FatalError, RetryableError, defineAgent, tool, defineConfig };
})()
