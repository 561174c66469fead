import type { FastifyInstance } from 'fastify'

/** `/healthz`: the process is alive. `/readyz`: it takes traffic (503 while draining or starting). */
export function healthRoutes(admin: FastifyInstance, state: { readonly draining: boolean }): void {
  admin.get('/healthz', async () => ({ status: 'ok' }))
  admin.get('/readyz', async (_request, reply) => {
    if (state.draining) return reply.code(503).send({ status: 'draining' })
    return { status: 'ready' }
  })
}
