"""The checks porter uses to decide what to keep: throughput (RPS sweep, knee, single stream) and quality.

workload.py builds requests, loadgen.py sends them and times the streams, metrics.py turns request
records into bench_serving-style figures, throughput.py sweeps request rates, quality.py scores
GSM8K-style and multiple-choice sets, cli.py is what `porter bench` and `porter check quality` call.
"""
