"""The tools that prove the NYC taxi pipeline: the offline demo and its fixture sources, the team
deployment on one machine and across hosts, the chaos runs and the benchmarks. They use the pipeline
(``nyc_taxi``); the pipeline never imports them."""
