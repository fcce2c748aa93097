"""Overload: every lever the system pulls when more is offered than the GPU finishes,
in the order they act (each named once; settings under `edge.overload` unless said).

1. Credit admission (strata.edge.flow.credits, `edge.flow`): each camera may have a
   credit of frames in the node, sized from the measured capacity and
   `edge.batching.delay_target_ms`; a frame beyond it is answered BUSY with a retry hint.
2. Queue-full BUSY (strata.edge.flow.queues, `edge.batching.queue_per_camera`): a frame
   admitted while its camera's queue is full is refused BUSY after all (rare: the
   credits cap the queues).
3. Adaptive batch limit (batch_limit.py, `edge.overload.batch_limit`; the rule policy
   of strata.edge.inference.scheduler): the batch halves while the queue delay misses
   the target and doubles back under half of it.
4. Deadline shedding (deadline.py, `edge.overload.deadline`): a frame taken for a batch
   that would finish past `scheduler.sla_ms` is shed, final ack SHED, reason deadline.
5. GPU pressure levels (gpu_pressure.py, `edge.overload.gpu_pressure`): GPU temperature,
   memory or inference p99 raise a level, cheapest action first: 1 no cloud crops,
   2 batch limit divided, 3 credits scaled down and devices asked for level 1 at least,
   4 low-priority cameras answered from their last result. limits.py hands levels 2-3
   to the batcher and the credits.
6. Source degradation on the device (strata.device.transport.degrade, `device.degrade.*`: enabled,
   motion_factor, rate_headroom, min_fps, backlog_s, up_s, down_s, drop_policy): the
   level in each ack (from the credits' saturation, `edge.flow.period_s`/`up_s`/`down_s`,
   and GPU pressure 3) lets a camera with a backlog raise its motion threshold, cap its
   frame rate, then drop by policy.
"""
