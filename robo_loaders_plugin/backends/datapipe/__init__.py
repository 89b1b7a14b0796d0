"""datapipe: a torchdata.nodes pipeline over robo-shards (framework-free parts; adapters add sample semantics)."""
