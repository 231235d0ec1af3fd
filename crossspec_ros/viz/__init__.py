"""viz layer of crossspec: caption overlays, RViz marker text, Foxglove live server and MCAP.

overlay.py is pure (numpy + Pillow) so nodes, bag tools and benchmarks can all draw the same
caption band; foxglove_out.py wraps foxglove-sdk and needs no rclpy either.
"""
