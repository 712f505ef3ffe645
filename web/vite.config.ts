import react from "@vitejs/plugin-react"
import { defineConfig } from "vite"

// The dashboard, served by the service at /app. `npm start` builds it when its
// sources change (src/Http/Dashboard.ts); `npx vite --config web/vite.config.ts`
// serves it with hot reload, proxying the API to a service on port 3000.
export default defineConfig({
  root: import.meta.dirname,
  base: "/app/",
  plugins: [react()],
  build: {
    emptyOutDir: true,
    // Hashed file names: the service serves them with a year-long cache.
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 2_000
  },
  server: {
    proxy: { "/api": "http://127.0.0.1:3000" }
  }
})
