"""Small namespace networks for the injector's and sniffer's tests and benchmarks: two hosts
on a veth, or two subnets joined by a router, made and removed by their owner only; and the
probe, echo and UDP blast programs run inside them."""
