import * as Migrator from "effect/sql/Migrator"
import foundation from "./0001_foundation.ts"
import conversations from "./0002_conversations.ts"
import billing from "./0003_billing.ts"
import orchestrations from "./0004_orchestrations.ts"
import executions from "./0005_executions.ts"
import executionEvents from "./0006_execution_events.ts"
import executionMessagesPruned from "./0007_execution_messages_pruned.ts"
import tokenBudgetAndAuthThrottle from "./0008_token_budget_and_auth_throttle.ts"
import jsonKeysAsGiven from "./0009_json_keys_as_given.ts"
import webhooks from "./0010_webhooks.ts"
import teams from "./0011_teams.ts"
import knowledge from "./0012_knowledge.ts"
import apiKeyExpiryAndUse from "./0013_api_key_expiry_and_use.ts"
import agentKnowledge from "./0014_agent_knowledge.ts"
import tenantPlanNotify from "./0015_tenant_plan_notify.ts"
import executionsHotStart from "./0016_executions_hot_start.ts"
import knowledgeSearchPendingList from "./0017_knowledge_search_pending_list.ts"
import knowledgeExtractionAttempts from "./0018_knowledge_extraction_attempts.ts"
import tokenReservations from "./0019_token_reservations.ts"
import tenantQuotas from "./0020_tenant_quotas.ts"
import webhookRedelivery from "./0021_webhook_redelivery.ts"
import runSlots from "./0022_run_slots.ts"
import eventStreamSlots from "./0023_event_stream_slots.ts"
import emailNormalized from "./0024_email_normalized.ts"
import webhookSecretUpgrades from "./0025_webhook_secret_upgrades.ts"
import secrets from "./0026_secrets.ts"
import tools from "./0027_tools.ts"
import toolCalls from "./0028_tool_calls.ts"
import agentResponseFormat from "./0029_agent_response_format.ts"
import toolKindMcp from "./0030_tool_kind_mcp.ts"
import mcpOauth from "./0031_mcp_oauth.ts"
import executionRetries from "./0032_execution_retries.ts"
import approvals from "./0033_approvals.ts"
import schedules from "./0034_schedules.ts"
import approvalWakesAndResultApproval from "./0035_approval_wakes_and_result_approval.ts"
import approvalDefaultsAndWaits from "./0036_approval_defaults_and_waits.ts"

/** Numbered migrations, applied once each in order. Never edit one that has landed: add the next. */
export const migrations = Migrator.fromRecord({
  "0001_foundation": foundation,
  "0002_conversations": conversations,
  "0003_billing": billing,
  "0004_orchestrations": orchestrations,
  "0005_executions": executions,
  "0006_execution_events": executionEvents,
  "0007_execution_messages_pruned": executionMessagesPruned,
  "0008_token_budget_and_auth_throttle": tokenBudgetAndAuthThrottle,
  "0009_json_keys_as_given": jsonKeysAsGiven,
  "0010_webhooks": webhooks,
  "0011_teams": teams,
  "0012_knowledge": knowledge,
  "0013_api_key_expiry_and_use": apiKeyExpiryAndUse,
  "0014_agent_knowledge": agentKnowledge,
  "0015_tenant_plan_notify": tenantPlanNotify,
  "0016_executions_hot_start": executionsHotStart,
  "0017_knowledge_search_pending_list": knowledgeSearchPendingList,
  "0018_knowledge_extraction_attempts": knowledgeExtractionAttempts,
  "0019_token_reservations": tokenReservations,
  "0020_tenant_quotas": tenantQuotas,
  "0021_webhook_redelivery": webhookRedelivery,
  "0022_run_slots": runSlots,
  "0023_event_stream_slots": eventStreamSlots,
  "0024_email_normalized": emailNormalized,
  "0025_webhook_secret_upgrades": webhookSecretUpgrades,
  "0026_secrets": secrets,
  "0027_tools": tools,
  "0028_tool_calls": toolCalls,
  "0029_agent_response_format": agentResponseFormat,
  "0030_tool_kind_mcp": toolKindMcp,
  "0031_mcp_oauth": mcpOauth,
  "0032_execution_retries": executionRetries,
  "0033_approvals": approvals,
  "0034_schedules": schedules,
  "0035_approval_wakes_and_result_approval": approvalWakesAndResultApproval,
  "0036_approval_defaults_and_waits": approvalDefaultsAndWaits
})
