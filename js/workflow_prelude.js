// Makes time and randomness deterministic inside a workflow VM: the runtime
// supplies __svc_now (the run's replayed clock), __svc_random (a PRNG seeded
// by the run id) and __svc_uuid (built on it). Steps run in other VMs and
// see the real clock.
(function () {
  const RealDate = Date;
  class WorkflowDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(__svc_now());
      else super(...args);
    }
    static now() {
      return __svc_now();
    }
  }
  globalThis.Date = WorkflowDate;
  Math.random = __svc_random;
  // crypto (js/web.js, installed on first use) takes randomUUID from
  // __svc_uuid and getRandomValues from Math.random here.
  // Workflow code is replayed and must not do I/O or wait on real time:
  // say where such code belongs instead of failing with "not defined".
  // The runtime keeps the first such message (__svc_guidance): a package
  // may catch it and throw its own, and the failed run still says it.
  const notHere = (what, instead) =>
    function () {
      const message = what + " cannot be used in workflow code (it is replayed and must be deterministic): " + instead;
      __svc_guidance(message);
      throw new Error(message);
    };
  globalThis.fetch = notHere("fetch", 'move it into a step (a function whose body starts with "use step")');
  // An indexed loop: for...of would make the array iterator's machinery in
  // every workflow VM.
  const timers = ["setTimeout", "setInterval", "clearTimeout", "clearInterval"];
  for (let i = 0; i < timers.length; i++)
    globalThis[timers[i]] = notHere(timers[i], 'use sleep() from "svc" to wait durably, or move it into a step');
})();
