import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { forTenant } from "../Http/Management.ts"
import * as Traced from "../Observability/Traced.ts"
import { Approvals } from "./Approvals.ts"
import { ApprovalDefaults } from "./Defaults.ts"

// The same handlers behind a session (the dashboard's inbox) and an API key.
const group = (name: "approvals" | "v1Approvals") =>
  HttpApiBuilder.group(
    Api,
    name,
    Traced.fn(function* (handlers) {
      const approvals = yield* Approvals
      return handlers.handleAll({
        list: forTenant((tenantId, { query }) => approvals.list(tenantId, query)),
        get: forTenant((tenantId, { params }) => approvals.get(tenantId, params.id)),
        decide: ({ params, payload }) =>
          CurrentPrincipal.use((principal) => approvals.decide(principal, params.id, payload))
      })
    })
  )

const defaults = HttpApiBuilder.group(
  Api,
  "approvalDefaults",
  Traced.fn(function* (handlers) {
    const approvalDefaults = yield* ApprovalDefaults
    return handlers.handleAll({
      get: forTenant((tenantId) => approvalDefaults.get(tenantId)),
      set: forTenant((tenantId, { payload }) => approvalDefaults.set(tenantId, payload))
    })
  })
)

export const layer = Layer.mergeAll(group("approvals"), group("v1Approvals"), defaults)
