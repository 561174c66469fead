import t from 'tap'
import { LiveSpend } from '../../src/admin/live/live-spend.ts'
import type { FinishedRequest } from '../../src/admin/live/finished-request.ts'

const request = (over: Partial<FinishedRequest>): FinishedRequest =>
  ({
    id: 'r',
    route: '/p',
    provider: 'openai',
    model: 'm',
    outcome: 'ok',
    statusCode: 200,
    e2e: 1,
    stalls: 0,
    outputTokens: 1,
    outputSource: 'usage',
    chunks: 1,
    concurrency: 1,
    endedAt: 1000,
    ...over,
  }) as FinishedRequest

t.test('spend sums by model and tenant over the windows, marks estimates, folds past the cap and forgets idle rows', async (t) => {
  const spend = new LiveSpend()
  t.equal(spend.view(0), undefined, 'nothing before a priced request')
  spend.add(request({ cost: undefined }))
  t.equal(spend.view(0), undefined, 'an unpriced request is no spend')
  spend.add(request({ cost: 0.5, currency: 'EUR', tenant: 'a', endedAt: 1000 }))
  spend.add(request({ cost: 0.25, currency: 'EUR', tenant: 'b', costEstimated: true, endedAt: 2000 }))
  spend.add(request({ cost: 1, currency: 'EUR', model: 'n', endedAt: 3000 }))
  t.same(spend.view(3000), {
    currency: 'EUR',
    total: [1.75, 1.75, 1.75],
    byModel: [
      { route: '/p', model: 'n', spent: [1, 1, 1], estimated: [0, 0, 0] },
      { route: '/p', model: 'm', spent: [0.75, 0.75, 0.75], estimated: [0.25, 0.25, 0.25] },
    ],
    byTenant: [
      { tenant: 'a', spent: [0.5, 0.5, 0.5], estimated: [0, 0, 0] },
      { tenant: 'b', spent: [0.25, 0.25, 0.25], estimated: [0.25, 0.25, 0.25] },
    ],
  })
  // 20 minutes later the rows are gone; the total's windows are empty.
  t.same(spend.view(20 * 60_000), { currency: 'EUR', total: [0, 0, 0], byModel: [], byTenant: [] })
  // Past 1,000 distinct models, new ones are summed under the route's `other`.
  for (let i = 0; i < 1001; i++) spend.add(request({ cost: i === 1000 ? 5 : 1, currency: 'EUR', model: `m${i}`, endedAt: 30 * 60_000 }))
  const view = spend.view(30 * 60_000) as { byModel: { model: string; spent: number[] }[] }
  t.equal(view.byModel.length, 10, 'the ten costliest shown')
  t.same(view.byModel[0], { route: '/p', model: 'other', spent: [5, 5, 5], estimated: [0, 0, 0] }, 'the 1,001st model is `other`, the costliest first')
})
