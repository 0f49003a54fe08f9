"""What plot_bench.py and validate_model.py share: reading the tables of all_reduce_perf -P 1 and of the peers'
benchmarks (size in field 1, time per operation in microseconds in field 5), and how several runs of one size
are summarised (--stat)."""
import statistics

STATS = {"median": statistics.median, "best": min}


def read_times(path):
    """(size, time us) for every table row of the file."""
    rows = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 7 or not p[0].isdigit():
                continue
            try:
                rows.append((int(p[0]), float(p[4])))
            except ValueError:
                continue
    return rows
