"""``python -m experiments.bench``: the data-path benchmark (:mod:`experiments.bench.bench`)."""

from experiments.bench.bench import main

if __name__ == "__main__":
    main()
