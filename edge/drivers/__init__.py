"""The drivers: the two threads that run the stages (as Roboflow Inference keeps
its loop in inference_pipeline.py and Savant its driver in deepstream/pipeline.py).

ingest_loop.py: the ingest thread, owner of the ROUTER socket (ingest, flow, tracking's
answers for skipped frames). worker.py: the worker thread, from the queues to publish
(flow, overload, inference, tracking, the after-tracking stages, publish, state). The
stage packages never import this one; strata.edge.build builds both drivers and
strata.edge.node runs them.
"""
