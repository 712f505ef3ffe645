/** The value of one Prometheus sample line, e.g. `name{a="b"} 3`. */
export const sample = (text: string, name: string, labels: Record<string, string>) => {
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name} `) && Object.keys(labels).length === 0) return Number(line.slice(name.length + 1))
    if (!line.startsWith(`${name}{`)) continue
    const inside = line.slice(name.length + 1, line.lastIndexOf("}"))
    if (Object.entries(labels).every(([key, value]) => inside.includes(`${key}="${value}"`))) {
      return Number(line.slice(line.lastIndexOf(" ") + 1))
    }
  }
  return undefined
}
