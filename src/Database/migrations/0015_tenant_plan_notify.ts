import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// A tenant's plan change is announced on `tenant_plan_changed` (payload: the
// tenant's id) when it commits, whoever makes it: the payment webhook, the
// service's own statements or an operator's. Nodes that answer an unlimited
// tenant's requests before its count lands (Billing/Quota.ts) hear of a
// downgrade from it.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE FUNCTION notify_tenant_plan_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('tenant_plan_changed', NEW.id);
      RETURN NULL;
    END
    $$`
  yield* sql`
    CREATE TRIGGER tenant_plan_changed AFTER UPDATE OF plan ON tenants
    FOR EACH ROW WHEN (OLD.plan IS DISTINCT FROM NEW.plan)
    EXECUTE FUNCTION notify_tenant_plan_changed()`
})
