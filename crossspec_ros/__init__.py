"""crossspec: live, lossless, cross-modal speculative captioning for ROS 2."""

__version__ = "0.1.0"
