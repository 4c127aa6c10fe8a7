"""The checks porter uses to decide what to keep: throughput (RPS sweep, knee, single stream) and quality.

workload.py builds requests, loadgen.py sends them (stream_parse.py reads the streams) and times them,
metrics.py turns request records into bench_serving-style figures, request_failures.py groups refused
requests, throughput.py sweeps request rates, quality.py scores GSM8K-style and multiple-choice sets
(quality_data.py reads the files, scoring.py matches answers). Each check kind is declared once
(kind.py: CheckKind; quality_kind, throughput_kind, single_stream_kind) and listed in registry.py;
commands/check_commands.py is what `porter bench` and `porter check quality` call.
"""
