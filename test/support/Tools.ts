/**
 * The tool most tool tests give an agent: `lookup_order`, an http GET of
 * `url` (a template over `{{args.id}}`, on a loopback receiver) taking one
 * required string `id`.
 */
export const lookupTool = (url: string) => ({
  name: "lookup_order",
  description: "Looks an order up by its id.",
  parameters: {
    type: "object",
    properties: { id: { type: "string" } },
    required: ["id"],
    additionalProperties: false
  },
  settings: { kind: "http", method: "GET", url, allowedHosts: ["127.0.0.1"] }
})
