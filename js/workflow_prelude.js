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
  globalThis.crypto = { randomUUID: __svc_uuid };
})();
